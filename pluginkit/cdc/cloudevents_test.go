package cdc

import (
	"reflect"
	"testing"
)

func TestSplitCloudEvent(t *testing.T) {
	ev := []byte(`{"specversion":"1.0","id":"0/1A:0","source":"/walcast/p/db/public/t","type":"com.walcast.change.insert","subject":"{\"id\":42}","time":"2026-11-30T10:00:00.123456Z","datacontenttype":"application/json","commitlsn":"0/1A","xid":"7","data":{"id":"0/1A:0","new":{"id":42}}}`)
	if !IsCloudEvent(ev) || IsCloudEvent([]byte(`{"id":"0/1A:0"}`)) {
		t.Fatal("IsCloudEvent")
	}
	attrs, data, err := SplitCloudEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := []CloudEventAttribute{
		{"specversion", "1.0"}, {"id", "0/1A:0"}, {"source", "/walcast/p/db/public/t"}, {"type", "com.walcast.change.insert"},
		{"subject", `{"id":42}`}, {"time", "2026-11-30T10:00:00.123456Z"}, {"datacontenttype", "application/json"},
		{"commitlsn", "0/1A"}, {"xid", "7"},
	}
	if !reflect.DeepEqual(attrs, want) {
		t.Errorf("attributes %v\nwant %v", attrs, want)
	}
	if string(data) != `{"id":"0/1A:0","new":{"id":42}}` {
		t.Errorf("data %s", data)
	}
	_, data, err = SplitCloudEvent([]byte(`{"specversion":"1.0","data_base64":"aGk="}`))
	if err != nil || string(data) != "hi" {
		t.Errorf("data_base64: %q %v", data, err)
	}
	if _, _, err := SplitCloudEvent([]byte(`{"specversion":`)); err == nil {
		t.Error("a cut event split without an error")
	}
}
