package httpbody_test

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/iii-on-nats/iii/workers/internal/httpbody"
)

func ExampleLimit() {
	body := io.NopCloser(strings.NewReader(strings.Repeat("x", 2048)))
	b, err := io.ReadAll(httpbody.Limit(body, 1<<10))
	fmt.Println(len(b), errors.Is(err, httpbody.ErrTooLarge))
	fmt.Println(err)
	// Output:
	// 1024 true
	// the response body is larger than 1 KiB (the limit)
}
