package redact_test

import (
	"fmt"

	"github.com/iii-on-nats/iii/agent/redact"
)

// A denial's args_excerpt: the key stays, its value does not.
func ExampleExcerpt() {
	args := map[string]any{"path": "/x", "api_key": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz"}
	fmt.Println(redact.Excerpt(args, 512))

	// Credentials in free text are replaced in place; counts stay.
	args = map[string]any{
		"command":    "curl -H 'Authorization: Bearer abc123def456' https://bob:hunter2@api.example.com/v1",
		"max_tokens": 1024,
	}
	fmt.Println(redact.Excerpt(args, 512))

	// A tight budget cuts the JSON and says so.
	fmt.Println(redact.Excerpt(args, 50))
	// Output:
	// {"api_key":"[redacted]","path":"/x"}
	// {"command":"curl -H 'Authorization: [redacted]' https://bob:[redacted]@api.example.com/v1","max_tokens":1024}
	// {"command":"curl -H 'Authorization: [redacted]'…
}

// A Redactor fixes options once and reports a bad one.
func ExampleNew() {
	r, err := redact.New(redact.WithExtraKeys("ssn"), redact.WithMaxDepth(2))
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Value(map[string]any{"user_ssn": "078-05-1120", "a": map[string]any{"b": map[string]any{}}}))

	_, err = redact.New(redact.WithMaxItems(0))
	fmt.Println(err)
	// Output:
	// map[a:map[b:[…]] user_ssn:[redacted]]
	// redact: invalid option: max items 0 must be at least 1
}
