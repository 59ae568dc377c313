package wire

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	sinkv1 "github.com/walcast/walcast/proto/sink/v1"
)

func TestBufferPoolTiers(t *testing.T) {
	p := newBufferPool()
	for _, n := range []int{1, 256, 257, 4096, 40_000, 1 << 20, 3 << 20} {
		bp := p.Get(n)
		if len(*bp) != n || cap(*bp) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*bp), cap(*bp))
		}
		p.Put(bp)
	}
}

// The codec's bytes are the standard proto encoding, whichever buffer they
// are built in, and read back the same.
func TestCodecRoundTrip(t *testing.T) {
	req := &sinkv1.DeliverRequest{}
	for i := range 500 {
		req.Events = append(req.Events, &sinkv1.Event{Id: "0/1:" + string(rune('0'+i%10)), Schema: "public", Table: "t", Op: "insert",
			Key: []byte(`{"id":1}`), Payload: make([]byte, 200)})
	}
	want, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // reused buffers
		bs, err := codec{}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := bs.Materialize(); string(got) != string(want) {
			t.Fatal("codec bytes differ from proto.Marshal")
		}
		var back sinkv1.DeliverRequest
		if err := (codec{}).Unmarshal(bs, &back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&back, req) {
			t.Fatal("round trip changed the message")
		}
		bs.Free()
	}
	small, _ := codec{}.Marshal(&sinkv1.DeliverResponse{Duplicates: 3})
	var resp sinkv1.DeliverResponse
	if err := (codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(small.Materialize())}, &resp); err != nil || resp.Duplicates != 3 {
		t.Fatalf("small message: %v %v", err, resp.Duplicates)
	}
}
