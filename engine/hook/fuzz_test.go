package hook

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/wire"
)

var msgpackHeader = nats.Header{wire.HeaderContentType: {wire.ContentMsgpack}}

// FuzzValidateAndMerge feeds arbitrary requests to Validate and arbitrary
// reply bodies (a JSON array of replies, and the raw bytes as one JSON and
// one msgpack reply) through the reply decoder and every merge rule: no
// panic, merged never nil, a blocking reply always wins first_block_wins.
func FuzzValidateAndMerge(f *testing.F) {
	f.Add([]byte(`{"topic":"agent::before_function_call","payload":{},"merge_rule":"first_block_wins"}`), []byte(`[{"block":true},{"args":{"a":1}}]`), "first_block_wins")
	f.Add([]byte(`{"topic":"a::b","merge_rule":"field_merge","timeout_ms":60000,"quiescence_ms":60000,"expected_replies":1000}`), []byte(`[{"a":1},{"a":2},[1],"s",null,{}]`), "field_merge")
	f.Add([]byte(`{"topic":"","merge_rule":"x","timeout_ms":-1}`), []byte(`[{"block":"true"}]`), "pipeline_last_wins")
	f.Add([]byte(`{"topic":"a.b*>","merge_rule":"pipeline_last_wins","quiescence_ms":1001}`), []byte("\x82\xa5block\xc3\xa1a\x01"), "")
	f.Add([]byte(`null`), []byte(`{not json`), "other")
	f.Add([]byte(`{}`), []byte("\x81\xa1a\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"), "field_merge") // {"a": NaN}
	if far, err := wire.Msgpack.Marshal(map[string]any{"block": true, "at": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		f.Add([]byte(`{}`), far, "first_block_wins") // a timestamp JSON cannot hold
	}
	f.Fuzz(func(t *testing.T, reqBody, replies []byte, rule string) {
		var req Request
		if json.Unmarshal(reqBody, &req) == nil {
			err := req.Validate()
			if err != nil && !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Validate error %v does not wrap ErrInvalidRequest", err)
			}
			if err == nil && (req.quiescence() > req.timeout() || req.timeout() > MaxTimeout || req.quiescence() <= 0) {
				t.Fatalf("valid request %+v has quiescence %v, timeout %v", req, req.quiescence(), req.timeout())
			}
		}

		var decoded []map[string]any
		add := func(hdr nats.Header, body []byte) {
			rep, kind := decodeReply(hdr, body)
			if kind == replyOK {
				if rep == nil {
					t.Fatalf("nil reply for %q", body)
				}
				decoded = append(decoded, rep)
			}
		}
		var many []json.RawMessage
		if json.Unmarshal(replies, &many) == nil {
			for _, raw := range many {
				add(nil, raw)
			}
		}
		add(nil, replies)
		add(msgpackHeader, replies)

		blocks := false
		for _, r := range decoded {
			blocks = blocks || Blocks(r)
		}
		for _, r := range []MergeRule{FirstBlockWins, FieldMerge, PipelineLastWins, MergeRule(rule)} {
			merged := Merge(r, decoded)
			if merged == nil {
				t.Fatalf("%s: nil merged", r)
			}
			if r == FirstBlockWins && blocks && !Blocks(merged) {
				t.Fatalf("a reply blocks but merged %v does not", merged)
			}
			if _, err := json.Marshal(merged); err != nil {
				t.Fatalf("%s: merged does not encode: %v", r, err)
			}
		}
	})
}
