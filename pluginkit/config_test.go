package pluginkit

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestDecodeConfig(t *testing.T) {
	var c struct {
		URL     string `json:"url"`
		Retries int    `json:"retries"`
	}
	if err := DecodeConfig(json.RawMessage(`{"url":"http://x","retries":3}`), &c); err != nil || c.URL != "http://x" || c.Retries != 3 {
		t.Fatalf("valid config: %v %+v", err, c)
	}
	for raw, field := range map[string]string{
		`{"retries":"three"}`: "retries",
		`{"url":1}`:           "url",
		`{"urls":"x"}`:        "urls",
		`[1]`:                 "",
	} {
		err := DecodeConfig(json.RawMessage(raw), &c)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field || ce.Msg == "" {
			t.Errorf("DecodeConfig(%s) = %v, want a ConfigError for %q", raw, err, field)
		}
	}
}
