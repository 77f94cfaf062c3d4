package answer_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/internal/answer"
)

func TestPage(t *testing.T) {
	t.Parallel()
	item := strings.Repeat("x", 1000)
	items := make([]string, 10)
	for i := range items {
		items[i] = item
	}
	tests := []struct {
		name       string
		maxPayload int64
		want       int
		truncated  bool
	}{
		{"all fit", 64 << 10, 10, false},
		{"some fit", answer.Headroom + 3*1004, 3, true},
		{"the first always fits", 10, 1, true},
	}
	for _, tt := range tests {
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			page, truncated, err := answer.Page(items, answer.NewPager(codec, tt.maxPayload))
			if err != nil || len(page) != tt.want || truncated != tt.truncated {
				t.Errorf("%s, %s: %d items, truncated %v, %v; want %d, %v", tt.name, codec.ContentType(), len(page), truncated, err, tt.want, tt.truncated)
			}
		}
	}
	if _, _, err := answer.Page([]any{func() {}}, answer.NewPager(wire.JSON, 1<<20)); err == nil {
		t.Fatal("an item that does not encode: no error")
	}
}

func ExamplePage() {
	page, truncated, _ := answer.Page([]string{"a", "b", "c"}, answer.NewPager(wire.JSON, 1<<20))
	fmt.Println(page, truncated)
	// Output: [a b c] false
}
