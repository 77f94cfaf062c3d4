package wire_test

import (
	"errors"
	"fmt"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Example encodes one payload with the codec a Content-Type header names:
// both codecs read the same json tags.
func Example() {
	type addReq struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	for _, ct := range []string{"", wire.ContentMsgpack} {
		codec := wire.ForContentType(ct)
		b, err := codec.Marshal(addReq{A: 2, B: 3})
		if err != nil {
			panic(err)
		}
		var back map[string]any
		if err := codec.Unmarshal(b, &back); err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d bytes, a=%v b=%v\n", codec.ContentType(), len(b), back["a"], back["b"])
	}
	// Output:
	// application/json: 13 bytes, a=2 b=3
	// application/msgpack: 7 bytes, a=2 b=3
}

// ExampleDecode builds the error reply a function answers with and turns
// it back into an error, as a caller sees it.
func ExampleDecode() {
	reply := wire.Reply(wire.Errorf(wire.CodeNotFound, "no key %q", "greeting"), wire.JSON)
	fmt.Println(reply.Header.Get("Nats-Service-Error-Code"), string(reply.Data))

	err := error(wire.Decode(reply))
	fmt.Println(errors.Is(err, wire.ErrNotFound), err)
	// Output:
	// 404 {"error":{"code":"not_found","message":"no key \"greeting\"","retryable":false}}
	// true not_found: no key "greeting"
}
