package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/walcast/walcast/pluginkit"
)

// CORS, so that a page of another origin can read the stream: with
// EventSource (a simple request), and with fetch-based clients that send
// Authorization: Bearer or Last-Event-ID themselves, which makes the
// browser ask first with a preflight OPTIONS request that carries no
// credentials.

// corsMaxAge is how long a browser may cache a preflight answer.
const corsMaxAge = 600

// corsAllowHeaders are the request headers a cross-origin client may send:
// the token, the resume position, and what EventSource polyfills add.
var corsAllowHeaders = []string{"Authorization", "Last-Event-ID", "Cache-Control", "Accept", "X-Requested-With"}

// cors is the validated policy.
type cors struct {
	origins     []string // exact origins; empty with any
	any         bool     // "*": every origin
	credentials bool     // Access-Control-Allow-Credentials: true
}

func (c cors) enabled() bool { return c.any || len(c.origins) > 0 }

// parseCORS checks cors_origin (one origin, kept for older configs) and
// cors_origins (a list). "*" allows every origin, and only without a token
// and without credentials: a stream that needs a secret is opened to the
// origins named, not to any page that learnt the secret.
func parseCORS(one string, list []string, credentials *bool, token string) (cors, error) {
	var c cors
	all := slices.Clone(list)
	field := "cors_origins"
	if one != "" {
		all = append(all, one)
		if len(list) == 0 {
			field = "cors_origin"
		}
	}
	for _, o := range all {
		if o == "*" {
			c.any = true
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return c, &pluginkit.ConfigError{Field: field, Msg: fmt.Sprintf(`%q is not an origin: want scheme://host[:port], for example "https://app.example.com", or "*"`, o)}
		}
		c.origins = append(c.origins, strings.ToLower(strings.TrimSuffix(o, "/")))
	}
	if credentials != nil && *credentials {
		c.credentials = true
	}
	switch {
	case c.any && token != "":
		return c, &pluginkit.ConfigError{Field: field, Msg: `"*" is only allowed without a token: list the origins that may read the stream`}
	case c.any && c.credentials:
		return c, &pluginkit.ConfigError{Field: "cors_credentials", Msg: `browsers refuse credentials with "*": list the origins in cors_origins`}
	case c.credentials && !c.enabled():
		return c, &pluginkit.ConfigError{Field: "cors_credentials", Msg: "needs cors_origins"}
	}
	return c, nil
}

// allowed returns the Access-Control-Allow-Origin value for a request's
// Origin, or "" when that origin may not read the stream.
func (c cors) allowed(origin string) string {
	switch {
	case origin == "":
		return ""
	case c.any && !c.credentials:
		return "*"
	case c.any || slices.Contains(c.origins, strings.ToLower(origin)):
		return origin
	}
	return ""
}

// headers sets the CORS headers of an actual (non-preflight) response.
func (c cors) headers(w http.ResponseWriter, req *http.Request) {
	if !c.enabled() {
		return
	}
	// The answer depends on Origin: caches must not hand one origin's
	// answer to another.
	w.Header().Add("Vary", "Origin")
	if o := c.allowed(req.Header.Get("Origin")); o != "" {
		w.Header().Set("Access-Control-Allow-Origin", o)
		if c.credentials {
			w.Header().Set("Access-Control-Allow-Credentials", "true")
		}
	}
}

// preflight answers an OPTIONS request. It never asks for the token: a
// browser sends none on a preflight.
func (c cors) preflight(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set("Allow", "GET, OPTIONS")
	origin := req.Header.Get("Origin")
	if !c.enabled() || origin == "" || req.Header.Get("Access-Control-Request-Method") == "" {
		// Not a CORS preflight, or CORS is off: the browser sees no
		// Allow-Origin and keeps the page from reading.
		if c.enabled() {
			h.Add("Vary", "Origin")
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.Add("Vary", "Origin")
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	o := c.allowed(origin)
	if o == "" {
		http.Error(w, "origin not allowed", http.StatusForbidden)
		return
	}
	h.Set("Access-Control-Allow-Origin", o)
	h.Set("Access-Control-Allow-Methods", "GET, OPTIONS")
	h.Set("Access-Control-Allow-Headers", strings.Join(corsAllowHeaders, ", "))
	h.Set("Access-Control-Max-Age", strconv.Itoa(corsMaxAge))
	if c.credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	w.WriteHeader(http.StatusNoContent)
}
