package hook

import (
	"bytes"
	"math"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Headers nats.go sets on a status message ("NATS/1.0 503"): the server
// answers a publish that has a reply subject but no subscriber with status
// 503 and an empty body.
const (
	headerStatus        = "Status"
	statusNoResponders  = "503"
	headerServiceError  = "Nats-Service-Error"
	headerServiceStatus = "Nats-Service-Error-Code"
)

type replyKind uint8

const (
	replyOK replyKind = iota
	replyInvalid
	replyNoResponders
)

// decodeReply decodes one reply by its Content-Type (JSON when absent; an
// empty JSON body is {}). A value that is not an object becomes
// {"value": v}. Status messages and NATS service error replies are not
// replies.
func decodeReply(hdr nats.Header, data []byte) (map[string]any, replyKind) {
	if len(hdr) > 0 {
		if st := hdr.Get(headerStatus); st != "" {
			if st == statusNoResponders && len(data) == 0 {
				return nil, replyNoResponders
			}
			return nil, replyInvalid
		}
		if hdr.Get(headerServiceError) != "" || hdr.Get(headerServiceStatus) != "" {
			return nil, replyInvalid
		}
	}
	var v any
	codec := wire.ForContentType(hdr.Get(wire.HeaderContentType))
	unmarshal := codec.Unmarshal
	if codec == wire.JSON && len(bytes.TrimSpace(data)) > 0 {
		// Numbers exact: a reply's int64 (an id in the args it rewrote)
		// is not rounded through a float64.
		unmarshal = agent.UnmarshalJSONExact
	}
	if err := unmarshal(data, &v); err != nil {
		return nil, replyInvalid
	}
	if codec != wire.JSON && !jsonSafe(v) {
		return nil, replyInvalid // the result could not be sent as JSON
	}
	if m, ok := v.(map[string]any); ok {
		if m == nil {
			m = map[string]any{}
		}
		return m, replyOK
	}
	return map[string]any{"value": v}, replyOK
}

// jsonSafe reports whether v, decoded from msgpack, encodes as JSON: it
// holds no NaN or infinite float and no timestamp (msgpack extension -1)
// outside the years 0..9999 that time.Time's MarshalJSON takes. Kept, one
// such reply made the answer of hooks::publish_collect to a JSON caller,
// and every Bind, fail. (The decoder bounds the nesting.)
func jsonSafe(v any) bool {
	switch x := v.(type) {
	case time.Time:
		return x.Year() >= 0 && x.Year() <= 9999
	case float64:
		return !math.IsNaN(x) && !math.IsInf(x, 0)
	case float32:
		return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0)
	case map[string]any:
		for _, e := range x {
			if !jsonSafe(e) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !jsonSafe(e) {
				return false
			}
		}
	}
	return true
}
