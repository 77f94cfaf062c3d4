package scripted

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// FuzzParsePrompt checks the echo prompt parser: no panic, only valid calls
// and bounded sleeps, and /call lines that round-trip.
func FuzzParsePrompt(f *testing.F) {
	for _, s := range []string{
		"hello",
		"/call a::b {\"x\":1}\n/call c::d",
		"/call fs::read {\"path\":\"/a b\",\"n\":[1,2,{\"k\":null}]}",
		"/fail rate_limited slow down\n/sleep 10",
		"/think hm\r\ntext\r\n",
		"/call",
		"/call a::b {",
		"/call ::x {}",
		"/sleep 99999999999999999999",
		"/call a::b {\"x\":1} trailing",
		"\x00/call\ta::b\t{}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		r, err := parsePrompt(text)
		if err != nil {
			return
		}
		if r.Delay < 0 || r.Delay > MaxSleep {
			t.Fatalf("delay %v", r.Delay)
		}
		if r.Fail != "" && !r.Fail.Valid() {
			t.Fatalf("fail kind %q", r.Fail)
		}
		var lines []string
		for _, c := range r.Calls {
			if err := subjects.ValidateFunctionID(c.FunctionID); err != nil {
				t.Fatalf("call %q: %v", c.FunctionID, err)
			}
			if c.Arguments == nil {
				t.Fatalf("call %q without arguments", c.FunctionID)
			}
			args, err := json.Marshal(c.Arguments)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, cmdCall+" "+c.FunctionID+" "+string(args))
		}
		again, err := parsePrompt(strings.Join(lines, "\n"))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", lines, err)
		}
		a, _ := json.Marshal(r.Calls)
		b, _ := json.Marshal(again.Calls)
		if string(a) != string(b) {
			t.Fatalf("calls do not round-trip:\n%s\n%s", a, b)
		}
	})
}

// FuzzEvents streams arbitrary prompts through the echo model: every
// event is valid and the deltas of each block concatenate to the block.
func FuzzEvents(f *testing.F) {
	f.Add("hello ✓ world", 3, 0)
	f.Add("/call a::b {\"x\":\"é\"}\n/think t\nanswer", 1, 5)
	f.Add("\xff\xfe broken utf8", 2, 1)
	// Arguments as the model reads them: markup unescaped, as
	// wire.MarshalJSON writes it (json.Marshal would write \u003cb\u003e).
	f.Add("/call a::b {\"html\":\"<b>&</b>\"}", 8, 0)
	f.Fuzz(func(t *testing.T, text string, size, maxTokens int) {
		if size < 1 || size > 64 || maxTokens < 0 {
			return
		}
		p, err := New(WithDeltaSize(size))
		if err != nil {
			t.Fatal(err)
		}
		req := StreamRequest{Model: EchoModel, MaxTokens: maxTokens, Messages: []agent.Message{agent.UserText(text, 1)}}
		evs, err := p.Events(req)
		if err != nil {
			t.Fatal(err)
		}
		parts := map[int]string{}
		for _, ev := range evs {
			if err := ev.Validate(); err != nil {
				t.Fatalf("event %+v: %v", ev, err)
			}
			if isDelta(ev.Type) {
				if len(ev.Delta) > size && utf8.RuneCountInString(ev.Delta) != 1 {
					t.Fatalf("delta %q longer than %d", ev.Delta, size)
				}
				parts[ev.Index] += ev.Delta
			}
		}
		last := evs[len(evs)-1]
		if last.Type != agent.ModelDone {
			return
		}
		for i, c := range last.Message.Content {
			want := c.Text
			if c.Type == agent.ContentFunctionCall {
				want = "{}"
				if len(c.Arguments) > 0 {
					b, err := wire.MarshalJSON(c.Arguments)
					if err != nil {
						t.Fatal(err)
					}
					want = string(b)
				}
			}
			if parts[i] != want {
				t.Fatalf("block %d: deltas %q, want %q", i, parts[i], want)
			}
		}
	})
}
