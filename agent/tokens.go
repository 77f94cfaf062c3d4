package agent

import "encoding/json"

// ImageTokens is what one image block counts for in [EstimateTokens]: the
// order of magnitude providers bill for a screenshot-sized image.
const ImageTokens = 1600

// EstimateTokens estimates what msgs cost a model: for each message,
// ceil(bytes / 4) of its text, thinking (and opaque thinking data),
// function calls (function id and arguments as JSON) and function results'
// text, plus [ImageTokens] per image. It is the one rule the compaction worker
// and the orchestrator share to decide when a session needs compacting; it
// errs on the large side of the scripted provider's count (one token per
// four bytes of the whole request, rounded up).
func EstimateTokens(msgs []Message) int {
	n := 0
	for i := range msgs {
		n += MessageTokens(msgs[i])
	}
	return n
}

// MessageTokens is [EstimateTokens] of one message.
func MessageTokens(m Message) int {
	bytes, images := 0, 0
	for i := range m.Content {
		c := &m.Content[i]
		switch c.Type {
		case ContentImage:
			images++
		case ContentFunctionCall:
			bytes += len(c.FunctionID) + argumentsLen(c.Arguments)
		default:
			bytes += len(c.Text) + len(c.Data)
		}
	}
	return tokens(bytes) + images*ImageTokens
}

// tokens is ceil(n / 4).
func tokens(n int) int { return (n + 3) / 4 }

// argumentsLen is the size of args as JSON ("{}" when empty).
func argumentsLen(args map[string]any) int {
	if len(args) == 0 {
		return 2
	}
	var c byteCounter
	enc := json.NewEncoder(&c)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args); err != nil {
		return 2
	}
	return c.n - 1 // Encode ends with a newline
}

// byteCounter counts what is written to it.
type byteCounter struct{ n int }

func (c *byteCounter) Write(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// UsedTokens is the context a model call used, as its usage reports it:
// input, cache reads and writes (which providers count apart from input)
// and output tokens.
func UsedTokens(u Usage) int {
	return int(u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens + u.OutputTokens)
}
