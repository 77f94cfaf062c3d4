package channel

import (
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParseSeq(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1", 1, true},
		{"42", 42, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false},
		{"99999999999999999999", 0, false},
		{"0", 0, false},
		{"007", 0, false},
		{"", 0, false},
		{"+1", 0, false},
		{"-1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"١", 0, false}, // Arabic-Indic digit one
		{"123456789012345678901", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSeq(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSeq(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseControl(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		h             nats.Header
		kind          Kind
		credit, bytes uint64
		ok            bool
	}{
		{"credit", controlHeader(KindCredit, 70, 0), KindCredit, 70, 0, true},
		{"credit and bytes", controlHeader(KindCredit, 70, 1<<20), KindCredit, 70, 1 << 20, true},
		{"cancel", controlHeader(KindCancel, 0, 0), KindCancel, 0, 0, true},
		{"cancel ignores bytes", nats.Header{HeaderKind: {"cancel"}, HeaderCreditBytes: {"x"}}, KindCancel, 0, 0, true},
		{"lower case", nats.Header{"iii-ch-kind": {"credit"}, "iii-ch-credit": {"5"}, "iii-ch-credit-bytes": {"9"}}, KindCredit, 5, 9, true},
		{"credit without amount", nats.Header{HeaderKind: {"credit"}}, 0, 0, 0, false},
		{"bytes without amount", nats.Header{HeaderKind: {"credit"}, HeaderCreditBytes: {"9"}}, 0, 0, 0, false},
		{"zero credit", nats.Header{HeaderKind: {"credit"}, HeaderCredit: {"0"}}, 0, 0, 0, false},
		{"zero bytes", nats.Header{HeaderKind: {"credit"}, HeaderCredit: {"1"}, HeaderCreditBytes: {"0"}}, 0, 0, 0, false},
		{"negative bytes", nats.Header{HeaderKind: {"credit"}, HeaderCredit: {"1"}, HeaderCreditBytes: {"-1"}}, 0, 0, 0, false},
		{"bytes twice", nats.Header{HeaderKind: {"credit"}, HeaderCredit: {"1"}, HeaderCreditBytes: {"1", "2"}}, 0, 0, 0, false},
		{"frame kind", nats.Header{HeaderKind: {"data"}}, 0, 0, 0, false},
		{"ping", controlHeader(KindPing, 0, 0), 0, 0, 0, false},
		{"keepalive", controlHeader(KindKeepAlive, 0, 0), 0, 0, 0, false},
		{"no kind", nats.Header{}, 0, 0, 0, false},
		{"nil", nil, 0, 0, 0, false},
		{"two spellings", nats.Header{"iii-ch-kind": {"cancel"}, "III-CH-KIND": {"cancel"}}, 0, 0, 0, false},
	}
	for _, tt := range tests {
		kind, credit, bytes, err := parseControl(tt.h)
		if (err == nil) != tt.ok || kind != tt.kind || credit != tt.credit || bytes != tt.bytes {
			t.Errorf("%s: parseControl = %v, %d, %d, %v", tt.name, kind, credit, bytes, err)
		}
		if err != nil && !errors.Is(err, errInvalidControl) {
			t.Errorf("%s: error %v does not wrap errInvalidControl", tt.name, err)
		}
	}
}

// FuzzParseControl: no panic on any credit message, every error is
// errInvalidControl, and what parses re-encodes to the same message.
func FuzzParseControl(f *testing.F) {
	f.Add("credit", "64", "1048576")
	f.Add("credit", "1", "")
	f.Add("cancel", "", "")
	f.Add("credit", "18446744073709551616", "1")
	f.Add("credit", "5", "007")
	f.Add("ping", "1", "1")
	f.Fuzz(func(t *testing.T, kind, credit, bytes string) {
		h := nats.Header{HeaderKind: {kind}}
		if credit != "" {
			h[HeaderCredit] = []string{credit}
		}
		if bytes != "" {
			h[HeaderCreditBytes] = []string{bytes}
		}
		k, c, b, err := parseControl(h)
		if err != nil {
			if !errors.Is(err, errInvalidControl) {
				t.Fatalf("error %v does not wrap errInvalidControl", err)
			}
			return
		}
		k2, c2, b2, err := parseControl(controlHeader(k, c, b))
		if err != nil || k2 != k || c2 != c || b2 != b {
			t.Fatalf("round trip of %v %d %d = %v %d %d %v", k, c, b, k2, c2, b2, err)
		}
	})
}

func TestIsKeepAlive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    nats.Header
		want bool
	}{
		{"keepalive", controlHeader(KindKeepAlive, 0, 0), true},
		{"lower case", nats.Header{"iii-ch-kind": {"keepalive"}}, true},
		{"credit", controlHeader(KindCredit, 5, 0), false},
		{"no-responders status", nats.Header{"Status": {"503"}}, false},
		{"twice", nats.Header{HeaderKind: {"keepalive", "keepalive"}}, false},
		{"two spellings", nats.Header{"iii-ch-kind": {"keepalive"}, "III-CH-KIND": {"keepalive"}}, false},
		{"other case of the value", nats.Header{HeaderKind: {"KeepAlive"}}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := isKeepAlive(tt.h); got != tt.want {
			t.Errorf("%s: isKeepAlive = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	for k := KindData; k <= KindKeepAlive; k++ {
		got, err := parseKind(k.String())
		if err != nil || got != k {
			t.Errorf("parseKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	if s := Kind(0).String(); s != "kind(0)" {
		t.Errorf("Kind(0) = %q", s)
	}
	if s := Kind(200).String(); s != "kind(200)" {
		t.Errorf("Kind(200) = %q", s)
	}
}

// FuzzParseFrame feeds arbitrary header blocks, as they come off the wire,
// to the frame parser: no panic, every error is ErrInvalidFrame, and what
// parses re-encodes to the same frame.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte("NATS/1.0\r\nIii-Ch-Seq: 1\r\nIii-Ch-Kind: data\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nIii-Ch-Seq: 18446744073709551615\r\nIii-Ch-Kind: end\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nIii-Ch-Seq: 18446744073709551616\r\nIii-Ch-Kind: error\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\niii-ch-seq: 7\r\niii-ch-kind: data\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nIii-Ch-Seq: 1\r\nIii-Ch-Seq: 2\r\nIii-Ch-Kind: data\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nIii-Ch-Seq: -1\r\nIii-Ch-Kind: data\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nIii-Ch-Seq: 01\r\nIii-Ch-Kind: credit\r\n\r\n"))
	f.Add([]byte("NATS/1.0 503\r\n\r\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := nats.DecodeHeadersMsg(raw)
		if err != nil {
			return
		}
		checkFrame(t, h)
	})
}

// FuzzFrameHeader builds headers from arbitrary keys and values, including
// several values for one key, which the wire format cannot always express.
func FuzzFrameHeader(f *testing.F) {
	f.Add(HeaderSeq, "1", "", HeaderKind, "data")
	f.Add("iii-ch-seq", "0", "", "III-CH-KIND", "end")
	f.Add(HeaderSeq, "1", "2", HeaderKind, "error")
	f.Add(HeaderSeq, "99999999999999999999", "", HeaderKind, "data")
	f.Add(HeaderSeq, "3", "", HeaderSeq, "data")
	f.Fuzz(func(t *testing.T, seqKey, seq, seq2, kindKey, kind string) {
		h := nats.Header{}
		h[seqKey] = append(h[seqKey], seq)
		if seq2 != "" {
			h[seqKey] = append(h[seqKey], seq2)
		}
		h[kindKey] = append(h[kindKey], kind)
		checkFrame(t, h)
		// The same header block read as a control message must not panic
		// either.
		if k, c, _, err := parseControl(h); err == nil {
			if k != KindCancel && (k != KindCredit || c == 0) {
				t.Fatalf("parseControl = %v, %d", k, c)
			}
		}
	})
}

func checkFrame(t *testing.T, h nats.Header) {
	t.Helper()
	seq, kind, err := parseFrame(h)
	if err != nil {
		if !errors.Is(err, ErrInvalidFrame) {
			t.Fatalf("error %v does not wrap ErrInvalidFrame", err)
		}
		return
	}
	if seq == 0 || (kind != KindData && kind != KindEnd && kind != KindError) {
		t.Fatalf("parseFrame accepted seq %d kind %v", seq, kind)
	}
	seq2, kind2, err := parseFrame(frameHeader(seq, kind, "application/json"))
	if err != nil || seq2 != seq || kind2 != kind {
		t.Fatalf("round trip of %d %v = %d %v %v", seq, kind, seq2, kind2, err)
	}
}

// FuzzParseSeq: whatever parses is canonical decimal.
func FuzzParseSeq(f *testing.F) {
	for _, s := range []string{"1", "0", "007", "18446744073709551615", "18446744073709551616", "-1", "+1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSeq(s)
		if err != nil {
			return
		}
		if n == 0 || strconv.FormatUint(n, 10) != s {
			t.Fatalf("parseSeq(%q) = %d, not canonical", s, n)
		}
	})
}
