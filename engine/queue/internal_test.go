package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n         uint64
		base, max time.Duration
		want      time.Duration
	}{
		{1, time.Second, time.Minute, time.Second},
		{2, time.Second, time.Minute, 2 * time.Second},
		{3, time.Second, time.Minute, 4 * time.Second},
		{6, time.Second, time.Minute, 32 * time.Second},
		{7, time.Second, time.Minute, time.Minute},
		{63, time.Second, time.Minute, time.Minute},
		{1 << 40, time.Second, time.Minute, time.Minute},
		{0, time.Second, time.Minute, time.Minute},
		{40, time.Hour, 24 * time.Hour, 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := backoff(tt.n, tt.base, tt.max, false); got != tt.want {
			t.Errorf("backoff(%d, %v, %v) = %v, want %v", tt.n, tt.base, tt.max, got, tt.want)
		}
		for range 20 {
			got := backoff(tt.n, tt.base, tt.max, true)
			if got < tt.want/2 || got > tt.want {
				t.Fatalf("jittered backoff(%d) = %v outside [%v, %v]", tt.n, got, tt.want/2, tt.want)
			}
		}
	}
}

func TestHeaderValue(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"plain":             "plain",
		"two\r\nlines":      "two  lines",
		"  padded\n":        "padded",
		"nul\x00byte":       "nul byte",
		"bad utf8 \xff end": "bad utf8 \uFFFD end",
		"":                  "",
	}
	for in, want := range tests {
		if got := headerValue(in); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", in, got, want)
		}
	}
	long := headerValue(strings.Repeat("é", MaxErrorMessage))
	if len(long) > MaxErrorMessage || !utf8.ValidString(long) {
		t.Fatalf("long value: %d bytes, valid %v", len(long), utf8.ValidString(long))
	}
}

func TestDeadLetterMsgStripsNatsHeaders(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	h.Set(nats.MsgIdHdr, "dedup-1")
	h.Set("Nats-Expected-Stream", "III_QUEUE")
	h.Set("nats-ttl", "1s")
	h.Set(engine.HeaderFunctionID, "a::b")
	h.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	md := &jetstream.MsgMetadata{NumDelivered: 5, Sequence: jetstream.SequencePair{Stream: 17}, Timestamp: time.Unix(100, 0)}
	m := deadLetterMsg("q", []byte("x"), h, md, "a::b", wire.Errorf(wire.CodeInternal, "boom"), time.Unix(200, 0))
	if m.Subject != "iii.dlq.q" || m.Header.Get(nats.MsgIdHdr) != "iii-dlq-q-17" ||
		m.Header.Get("Nats-Expected-Stream") != "" || m.Header.Get("nats-ttl") != "" ||
		m.Header.Get(HeaderOriginalMsgID) != "dedup-1" || m.Header.Get("traceparent") == "" ||
		m.Header.Get(HeaderEnqueuedAt) != "1970-01-01T00:01:40Z" {
		t.Fatalf("dead letter %s %v", m.Subject, m.Header)
	}
	dl := parseDeadLetter(3, m.Data, m.Header)
	if dl.Deliveries != 5 || dl.ErrorCode != wire.CodeInternal || dl.ErrorMessage != "boom" ||
		!dl.EnqueuedAt.Equal(time.Unix(100, 0)) || !dl.DeadAt.Equal(time.Unix(200, 0)) || dl.Queue != "q" {
		t.Fatalf("parsed %+v", dl)
	}
	// Redrive strips the dead-letter headers and keeps the history.
	r := redriveMsg("q", &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: 3, Header: m.Header, Data: m.Data})
	for _, k := range dlqOnly {
		if r.Header.Get(k) != "" {
			t.Fatalf("redriven message keeps %s: %v", k, r.Header)
		}
	}
	if r.Subject != "iii.queue.q" || r.Header.Get(HeaderRedrives) != "1" || r.Header.Get(nats.MsgIdHdr) != "iii-redrive-q-3" ||
		r.Header.Get(HeaderEnqueuedAt) != "1970-01-01T00:01:40Z" || r.Header.Get(engine.HeaderFunctionID) != "a::b" {
		t.Fatalf("redriven %s %v", r.Subject, r.Header)
	}
	// A message the producer gave no id: its dead letter after a redrive
	// names no original id (it recorded the redrive's).
	h.Del(nats.MsgIdHdr)
	m = deadLetterMsg("q", []byte("x"), h, md, "a::b", wire.Errorf(wire.CodeInternal, "boom"), time.Unix(200, 0))
	r = redriveMsg("q", &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: 4, Header: m.Header, Data: m.Data})
	again := deadLetterMsg("q", r.Data, r.Header, md, "a::b", wire.Errorf(wire.CodeInternal, "boom"), time.Unix(300, 0))
	if id := again.Header.Get(HeaderOriginalMsgID); id != "" {
		t.Fatalf("the second dead letter names %q as the producer's id", id)
	}
}

// TestRedriveAfterCrashEnqueuesOnce simulates a Redrive that crashed
// between its publish and its delete: the retried Redrive publishes the
// same Nats-Msg-Id, JetStream drops it, and the dead letter is deleted.
func TestRedriveAfterCrashEnqueuesOnce(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	dlq, err := e.EnsureStream(ctx, engine.DLQStreamConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.EnsureStream(ctx, engine.QueueStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(engine.HeaderFunctionID, "a::b")
	md := &jetstream.MsgMetadata{NumDelivered: 5, Sequence: jetstream.SequencePair{Stream: 1}, Timestamp: time.Now()}
	if _, err := e.JetStream().PublishMsg(ctx, deadLetterMsg("q", []byte(`{}`), h, md, "a::b", wire.Errorf(wire.CodeInternal, "x"), time.Now())); err != nil {
		t.Fatal(err)
	}
	raw, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The first, crashed redrive got as far as its publish.
	if _, err := e.JetStream().PublishMsg(ctx, redriveMsg("q", raw)); err != nil {
		t.Fatal(err)
	}
	res, err := Redrive(ctx, e, "q")
	if err != nil || res != (RedriveResult{Redriven: 1}) {
		t.Fatalf("redrive = %+v, %v", res, err)
	}
	st, err := Inspect(ctx, e, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 1 || st.DeadLetters != 0 {
		t.Fatalf("stats %+v: want the message queued once and no dead letter", st)
	}
}

func TestPayloadEncode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string // JSON
		want string // JSON of the msgpack-decoded result
	}{
		{"object", `{"a":1,"b":[1,2.5,"x",true,null]}`, `{"a":1,"b":[1,2.5,"x",true,null]}`},
		{"big int", `{"n":9007199254740993}`, `{"n":9007199254740993}`},
		{"uint64", `18446744073709551615`, `18446744073709551615`},
		{"huge", `1e400`, `"1e400"`},
		{"null", `null`, `{}`},
		{"string", `"s"`, `"s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Payload
			if err := p.UnmarshalJSON([]byte(tt.in)); err != nil {
				t.Fatal(err)
			}
			b, err := p.Encode(wire.Msgpack)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := wire.Msgpack.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			out, err := wire.JSON.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Fatalf("got %s, want %s", out, tt.want)
			}
			// Same codec: the bytes pass through.
			if !p.IsNull() {
				same, err := p.Encode(wire.JSON)
				if err != nil || string(same) != tt.in {
					t.Fatalf("pass-through = %s, %v", same, err)
				}
			}
		})
	}
	var zero Payload
	if b, err := zero.Encode(wire.JSON); err != nil || string(b) != "{}" {
		t.Fatalf("zero payload = %s, %v", b, err)
	}
}

func TestRedriveMsgIDsAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, q := range []string{"a", "a-1", "a-11", "b"} {
		for _, seq := range []uint64{1, 11, 111} {
			for _, id := range []string{dlqMsgID(q, seq), redriveMsgID(q, seq)} {
				key := fmt.Sprint(q, "/", seq)
				if prev, ok := seen[id]; ok && prev != key {
					t.Fatalf("id %s for %s and %s", id, prev, key)
				}
				seen[id] = key
			}
		}
	}
}

func TestHasDeadLetter(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	if _, err := e.EnsureStream(ctx, engine.DLQStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	md := func(seq uint64) *jetstream.MsgMetadata {
		return &jetstream.MsgMetadata{NumDelivered: 2, Sequence: jetstream.SequencePair{Stream: seq}, Timestamp: at}
	}
	we := wire.Errorf(wire.CodeInternal, "boom")
	for seq := uint64(1); seq <= 300; seq++ { // more than one fetch
		if seq == 7 {
			continue
		}
		h := nats.Header{}
		h.Set(engine.HeaderFunctionID, "a::b")
		if _, err := e.JetStream().PublishMsg(ctx, deadLetterMsg("q", []byte("x"), h, md(seq), "a::b", we, at)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		queue string
		seq   uint64
		want  bool
	}{
		{"q", 1, true},
		{"q", 300, true},
		{"q", 7, false},
		{"q", 301, false},
		{"other", 1, false},
	}
	for _, tt := range tests {
		got, err := hasDeadLetter(ctx, e.JetStream(), tt.queue, md(tt.seq))
		if err != nil || got != tt.want {
			t.Errorf("hasDeadLetter(%s, %d) = %v, %v; want %v", tt.queue, tt.seq, got, err, tt.want)
		}
	}
	later := md(1)
	later.Timestamp = at.Add(time.Hour) // enqueued after every dead letter
	if got, err := hasDeadLetter(ctx, e.JetStream(), "q", later); err != nil || got {
		t.Errorf("dead letters older than the message: %v, %v", got, err)
	}
}

// The errors a consumer keeps for redeliveries are bounded in number
// (oldest evicted first) and in size (cut as a dead letter's header).
func TestVerdictsBounded(t *testing.T) {
	t.Parallel()
	var v verdicts
	long := wire.Errorf(wire.CodeInvalidPayload, "%s", strings.Repeat("x", 10*MaxErrorMessage))
	for seq := uint64(1); seq <= maxVerdicts+1; seq++ {
		v.put(seq, long)
	}
	if v.get(1) != nil || len(v.m) != maxVerdicts {
		t.Fatalf("%d kept, first %v: want %d, the first evicted", len(v.m), v.get(1), maxVerdicts)
	}
	got := v.get(maxVerdicts + 1)
	if got == nil || got.Code != wire.CodeInvalidPayload || len(got.Message) != MaxErrorMessage {
		t.Fatalf("kept %+v", got)
	}
	v.forget(maxVerdicts + 1)
	if v.get(maxVerdicts+1) != nil {
		t.Fatal("forgotten verdict still kept")
	}
}
