package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// TruncatedDetails are the details of a result [FunctionResult.Capped]
// cut: how large it was, what is left of its content, and why.
type TruncatedDetails struct {
	Truncated bool `json:"truncated"`
	// Bytes is the result's size before: its content blocks' text and data
	// and its details as JSON.
	Bytes int `json:"bytes"`
	// Kept is the bytes of content left.
	Kept int `json:"kept"`
	// Limit is the bound the result was cut to.
	Limit int `json:"limit"`
}

// Size is what r weighs against [FunctionResult.Capped]'s bound: its
// content blocks' text and data, and its details as JSON.
func (r FunctionResult) Size() int {
	n := contentSize(r.Content)
	if r.Details != nil {
		// Measured as stored and sent: without HTML escaping, which
		// would count a tag-dense value up to six times its size
		// (engine/wire.MarshalJSON).
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r.Details); err == nil {
			n += b.Len() - 1 // less the newline Encode ends with
		}
	}
	return n
}

func contentSize(cs []Content) int {
	n := 0
	for _, c := range cs {
		n += len(c.Text) + len(c.Data)
	}
	return n
}

// capNote is the most a truncation's note and details take.
const capNote = 160

// Capped returns r with at most limit bytes ([FunctionResult.Size]), and
// whether it cut anything (limit ≤ 0: r as it is). A result over the limit
// loses its details, replaced by [TruncatedDetails]; its text blocks keep
// their beginnings, cut on a character boundary, and the last one kept
// ends with a note saying how much was cut, so the model knows; blocks of
// data (images) that do not fit whole are left out. IsError and Terminate
// stay.
func (r FunctionResult) Capped(limit int) (FunctionResult, bool) {
	size := r.Size()
	if limit <= 0 || size <= limit {
		return r, false
	}
	out := FunctionResult{IsError: r.IsError, Terminate: r.Terminate}
	budget := max(limit-capNote, 0)
	cut := false
	for _, c := range r.Content {
		switch {
		case len(c.Text)+len(c.Data) <= budget:
			budget -= len(c.Text) + len(c.Data)
			out.Content = append(out.Content, c)
			continue
		case c.Data == "" && budget > 0:
			n := budget
			for n > 0 && !utf8.RuneStart(c.Text[n]) {
				n--
			}
			c.Text = c.Text[:n]
			budget -= n
			out.Content = append(out.Content, c)
		}
		cut = true
	}
	kept := contentSize(out.Content)
	if cut || kept < contentSize(r.Content) {
		out.Content = append(out.Content, Text(fmt.Sprintf("\n[result truncated by the harness: %d bytes, the first %d kept]", size, kept)))
	}
	out.Details = TruncatedDetails{Truncated: true, Bytes: size, Kept: kept, Limit: limit}
	return out, true
}
