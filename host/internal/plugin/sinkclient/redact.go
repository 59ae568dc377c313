package sinkclient

import (
	"regexp"
	"strings"
)

// urlInText matches an absolute URL in free text: a scheme, "://", the
// authority, then the path, query and fragment up to a space, a quote or
// an angle bracket (how Go, JSON and most logs delimit one).
var urlInText = regexp.MustCompile("\\b[A-Za-z][A-Za-z0-9+.\\-]*://[^\\s\"'<>`]*")

// redactURLs cuts every absolute URL in s down to scheme://host[:port].
//
// Everything a plugin says reaches walcast's log, walcast.parked.last_error,
// `walcast status`, `walcast parked` and the console, and sink URLs carry
// credentials in every other part: user:password@, Slack-style hook paths,
// ?token= and ?sig= queries. The built-in sinks never show more than the
// host; this is the host's own guard for every plugin, third-party ones
// included. A URL without a host (unix:///run/x.sock, file:///etc/x) is a
// local path, not a web address, and is left as it is.
func redactURLs(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, redactURL)
}

// redactURL cuts one URL as redactURLs describes. Punctuation ending the
// match (the colon of "POST https://x/y: 500", a closing parenthesis or
// full stop) belongs to the sentence, not the URL, and is kept.
func redactURL(u string) string {
	i := strings.Index(u, "://")
	scheme, rest := u[:i], u[i+3:]
	authority, tail := rest, ""
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		authority, tail = rest[:j], rest[j:]
	}
	if authority == "" {
		return u
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = authority[at+1:]
	}
	keep := len(tail)
	for keep > 0 && strings.IndexByte(".,;:!)]}", tail[keep-1]) >= 0 {
		keep--
	}
	return scheme + "://" + authority + tail[keep:]
}

// redactValue applies redactURLs to a log attribute's value: strings,
// errors, and the maps and lists a plugin's JSON log line decodes to.
func redactValue(v any) any {
	switch x := v.(type) {
	case string:
		return redactURLs(x)
	case error:
		if s := x.Error(); strings.Contains(s, "://") {
			return redactURLs(s)
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = redactValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactValue(e)
		}
		return out
	}
	return v
}
