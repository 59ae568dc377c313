package cdc

import (
	"cmp"
	"math"
	"testing"
)

func TestParseEventID(t *testing.T) {
	tests := []struct {
		in      string
		want    EventID
		wantErr bool
	}{
		{in: "0/0:0", want: EventID{}},
		{in: "0/1A2B3C8:0", want: EventID{CommitLSN: 0x1A2B3C8}},
		{in: "0/1a2b3c8:17", want: EventID{CommitLSN: 0x1A2B3C8, Index: 17}},
		{in: "16/B374D848:3", want: EventID{CommitLSN: 0x16_B374D848, Index: 3}},
		{in: "FFFFFFFF/FFFFFFFF:18446744073709551615", want: EventID{CommitLSN: math.MaxUint64, Index: math.MaxUint64}},

		{in: "", wantErr: true},
		{in: "0/1A", wantErr: true},                      // no index
		{in: "0/1A:", wantErr: true},                     // empty index
		{in: "0/1A:01", wantErr: true},                   // leading zero
		{in: "0/1A:00", wantErr: true},                   // leading zero
		{in: "0/1A:+1", wantErr: true},                   // sign
		{in: "0/1A:-1", wantErr: true},                   // sign
		{in: "0/1A: 1", wantErr: true},                   // space
		{in: "0/1A:1x", wantErr: true},                   // trailing garbage
		{in: "0/1A:18446744073709551616", wantErr: true}, // overflow
		{in: "1A:0", wantErr: true},                      // no slash
		{in: "/1A:0", wantErr: true},                     // empty high half
		{in: "0/:0", wantErr: true},                      // empty low half
		{in: "0/123456789:0", wantErr: true},             // low half over 32 bits
		{in: "0/G:0", wantErr: true},                     // not hex
		{in: "0/1A:0:1", wantErr: true},                  // two colons
	}
	for _, tt := range tests {
		got, err := ParseEventID(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseEventID(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseEventID(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseEventID(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestEventIDString(t *testing.T) {
	tests := []struct {
		id   EventID
		want string
	}{
		{EventID{}, "0/0:0"},
		{EventID{CommitLSN: 0x1A2B3C8}, "0/1A2B3C8:0"},
		{EventID{CommitLSN: 0x16_0000000A, Index: 12}, "16/A:12"},
	}
	for _, tt := range tests {
		if got := tt.id.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.id, got, tt.want)
		}
		b, err := tt.id.MarshalText()
		if err != nil || string(b) != tt.want {
			t.Errorf("%+v.MarshalText() = %q, %v; want %q", tt.id, b, err, tt.want)
		}
	}
}

func TestCompareEventIDs(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"0/A:0", "0/1A:0", -1}, // string order would say the opposite
		{"0/1A:0", "0/A:0", 1},
		{"0/1A:0", "0/1a:0", 0}, // hex case does not matter
		{"0/1A:2", "0/1A:10", -1},
		{"0/1A:10", "0/1A:2", 1},
		{"0/FFFFFFFF:99", "1/0:0", -1}, // the high half dominates
		{"1/0:0", "0/FFFFFFFF:0", 1},
		{"0/0:0", "0/0:0", 0},
		{"garbage", "0/0:0", -1}, // invalid sorts first
		{"0/0:0", "garbage", 1},
		{"0/1A:01", "0/0:0", -1}, // leading zero makes it invalid
		{"garbage", "", 0},       // two invalid ids are equal
		{"0/1A:-1", "x", 0},
	}
	for _, tt := range tests {
		if got := CompareEventIDs(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareEventIDs(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzEventID checks that the string form round-trips and that Compare and
// CompareEventIDs agree with the numeric order of (commit LSN, index).
func FuzzEventID(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint64(0xA), uint64(0), uint64(0x1A), uint64(0))
	f.Add(uint64(0x1A), uint64(2), uint64(0x1A), uint64(10))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(1<<32), uint64(0))
	f.Fuzz(func(t *testing.T, lsnA, idxA, lsnB, idxB uint64) {
		a := EventID{CommitLSN: lsnA, Index: idxA}
		b := EventID{CommitLSN: lsnB, Index: idxB}
		for _, id := range []EventID{a, b} {
			got, err := ParseEventID(id.String())
			if err != nil {
				t.Fatalf("ParseEventID(%q): %v", id.String(), err)
			}
			if got != id {
				t.Fatalf("ParseEventID(%q) = %+v, want %+v", id.String(), got, id)
			}
		}
		want := cmp.Or(cmp.Compare(lsnA, lsnB), cmp.Compare(idxA, idxB))
		if got := a.Compare(b); got != want {
			t.Fatalf("%v.Compare(%v) = %d, want %d", a, b, got, want)
		}
		if got := CompareEventIDs(a.String(), b.String()); got != want {
			t.Fatalf("CompareEventIDs(%q, %q) = %d, want %d", a, b, got, want)
		}
		if a.Less(b) != (want < 0) {
			t.Fatalf("%v.Less(%v) = %v, want %v", a, b, a.Less(b), want < 0)
		}
	})
}

// FuzzParseEventID feeds arbitrary strings to the parser: it must never
// panic, and whatever it accepts must print back to a canonical form that
// parses to the same id.
func FuzzParseEventID(f *testing.F) {
	for _, s := range []string{"0/0:0", "0/1a2b3c8:17", "0/1A:01", "FFFFFFFF/FFFFFFFF:18446744073709551615", ":", "0/:0", "00000000/0000000A:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseEventID(s)
		if err != nil {
			if CompareEventIDs(s, "0/0:0") != -1 {
				t.Fatalf("invalid id %q does not sort before every valid id", s)
			}
			return
		}
		again, err := ParseEventID(id.String())
		if err != nil || again != id {
			t.Fatalf("ParseEventID(%q) = %+v, %v; want %+v", id.String(), again, err, id)
		}
		if CompareEventIDs(s, id.String()) != 0 {
			t.Fatalf("CompareEventIDs(%q, %q) != 0", s, id.String())
		}
	})
}
