package wire

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The host and its plugins exchange batches of tens of KiB to a few MiB.
// gRPC's default buffer pool has tiers of 256 B, 4, 16 and 32 KiB and
// 1 MiB, and zeroes the whole buffer it hands out: a 40 KiB Deliver
// request costs a 1 MiB memclr on each side (about a tenth of the host's
// CPU when streaming). codec and bufferPool marshal and receive into
// power-of-two buffers that are not cleared — every byte handed out is
// overwritten before it is read, and nothing but our own messages ever
// sits in them. The wire format is gRPC's proto codec, unchanged.

// ClientOptions are the options the host's plugin client dials with.
func ClientOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMessageSize),
			grpc.MaxCallSendMsgSize(MaxMessageSize),
			grpc.ForceCodecV2(codec{}),
		),
		experimental.WithBufferPool(sharedPool),
		grpc.WithWriteBufferSize(transportBuffer),
		grpc.WithReadBufferSize(transportBuffer),
		grpc.WithInitialWindowSize(flowWindow),
		grpc.WithInitialConnWindowSize(flowWindow),
	}
}

// ServerOptions are the options a plugin's gRPC server runs with.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.ForceServerCodecV2(codec{}),
		experimental.BufferPool(sharedPool),
		grpc.WriteBufferSize(transportBuffer),
		grpc.ReadBufferSize(transportBuffer),
		grpc.InitialWindowSize(flowWindow),
		grpc.InitialConnWindowSize(flowWindow),
	}
}

// HTTP/2 settings of the host–plugin connection. A Deliver request is
// typically 100 KiB–1 MiB. With gRPC's defaults (a 64 KiB window grown by
// BDP pings, 32 KiB transport buffers) each request waited for several
// WINDOW_UPDATE frames and was written in 32 KiB pieces: the host's loopy
// writer took 0.63 s of CPU per 1.3M changes on the stdout benchmark,
// 0.11 s with these. Both ends run on one machine and the plugin reads
// each request whole anyway, so a large fixed window holds nothing the
// host would not send; the frames on the wire are the same.
const (
	transportBuffer = 256 << 10
	flowWindow      = 8 << 20
)

// codec is gRPC's proto codec with bufferPool.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(DeliverBatch); ok {
		if b.hasBigPayload() {
			return b.wireBuffers(), nil
		}
		bp := sharedPool.Get(b.Size())
		*bp = b.AppendWire((*bp)[:0])
		return mem.BufferSlice{mem.NewBuffer(bp, sharedPool)}, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto codec: cannot marshal %T", v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := proto.MarshalOptions{UseCachedSize: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	bp := sharedPool.Get(size)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*bp)[:0], m)
	if err != nil {
		sharedPool.Put(bp)
		return nil, err
	}
	*bp = b
	return mem.BufferSlice{mem.NewBuffer(bp, sharedPool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*DeliverRequest); ok {
		// A buffer of its own, not from the pool: the events point into
		// it, and a sink may keep them.
		var err error
		*r, err = decodeDeliverRequest(data.Materialize())
		return err
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("proto codec: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(sharedPool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// sharedPool serves every gRPC buffer of the host's plugin clients and of
// a plugin's server.
var sharedPool = newBufferPool()

// bufferPool is a mem.BufferPool with one sync.Pool per power of two from
// 256 B to 64 MiB; it does not clear what it hands out.
type bufferPool struct {
	tiers [minShift + numTiers]sync.Pool
}

const (
	minShift = 8
	numTiers = 19 // 2^8 .. 2^26
)

func newBufferPool() *bufferPool { return &bufferPool{} }

// tier is the index of the smallest power of two holding n bytes.
func tier(n int) int {
	if n <= 1<<minShift {
		return minShift
	}
	return bits.Len(uint(n - 1))
}

func (p *bufferPool) Get(n int) *[]byte {
	t := tier(n)
	if t >= len(p.tiers) {
		b := make([]byte, n)
		return &b
	}
	if bp, ok := p.tiers[t].Get().(*[]byte); ok {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, 1<<t)
	return &b
}

func (p *bufferPool) Put(bp *[]byte) {
	c := cap(*bp)
	if c < 1<<minShift || c&(c-1) != 0 {
		return // not one of ours (or an odd size): let the GC have it
	}
	t := bits.Len(uint(c)) - 1
	if t >= len(p.tiers) {
		return
	}
	p.tiers[t].Put(bp)
}
