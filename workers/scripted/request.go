package scripted

import (
	"fmt"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// maxModelLen bounds a model name, as agent.RunStart does.
const maxModelLen = 256

// StreamRequest is the payload of provider::scripted::stream (SPEC §4
// providers): the transcript to answer and the channel to stream the answer
// into.
type StreamRequest struct {
	// Channel is the id of the channel the caller opened and reads.
	Channel      string          `json:"channel"`
	SystemPrompt string          `json:"system_prompt,omitempty"`
	Model        string          `json:"model"`
	Messages     []agent.Message `json:"messages"`
	// Tools are the functions offered to the model, in whatever shape the
	// caller uses ({name, description, parameters}, a native tool
	// definition...). The scripted models do not restrict their calls to
	// them (a prompt names the function it calls): they only count towards
	// the input tokens.
	Tools []any `json:"tools,omitempty"`
	// MaxTokens bounds the output tokens; 0 means no bound. An answer cut
	// at the bound stops with stop_reason "length".
	MaxTokens int `json:"max_tokens,omitempty"`
	// ThinkingLevel is accepted and ignored.
	ThinkingLevel string `json:"thinking_level,omitempty"`
	// Transcript names the transcript for the worker to keep, and may make
	// the request a continuation ([agent.TranscriptRef]).
	Transcript *agent.TranscriptRef `json:"transcript,omitempty"`
	// EventBatches lets the stream put the events that are ready together
	// (no delay or pace between them) in one frame, as an array of events
	// ([agent.ProviderRequest.EventBatches]).
	EventBatches bool `json:"event_batches,omitempty"`
}

// Validate checks r: a channel id of 1–128 characters of [A-Za-z0-9_-], a
// model name, at least one message, each valid, and max_tokens ≥ 0.
// Errors wrap [ErrInvalidRequest].
func (r StreamRequest) Validate() error {
	if err := subjects.ValidateID("channel", r.Channel); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return r.Request().Validate()
}

// Request is r without its channel.
func (r StreamRequest) Request() CompleteRequest {
	return CompleteRequest{
		SystemPrompt:  r.SystemPrompt,
		Model:         r.Model,
		Messages:      r.Messages,
		Tools:         r.Tools,
		MaxTokens:     r.MaxTokens,
		ThinkingLevel: r.ThinkingLevel,
	}
}

// CompleteRequest is the payload of provider::scripted::complete: a
// [StreamRequest] without the channel.
type CompleteRequest struct {
	SystemPrompt  string          `json:"system_prompt,omitempty"`
	Model         string          `json:"model"`
	Messages      []agent.Message `json:"messages"`
	Tools         []any           `json:"tools,omitempty"`
	MaxTokens     int             `json:"max_tokens,omitempty"`
	ThinkingLevel string          `json:"thinking_level,omitempty"`
}

// Validate checks r as [StreamRequest.Validate] does, without the channel.
func (r CompleteRequest) Validate() error {
	if r.Model == "" {
		return fmt.Errorf("%w: model is missing", ErrInvalidRequest)
	}
	if len(r.Model) > maxModelLen {
		return fmt.Errorf("%w: model is longer than %d bytes", ErrInvalidRequest, maxModelLen)
	}
	if len(r.Messages) == 0 {
		return fmt.Errorf("%w: no messages", ErrInvalidRequest)
	}
	for i, m := range r.Messages {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%w: messages[%d]: %w", ErrInvalidRequest, i, err)
		}
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("%w: max_tokens is negative", ErrInvalidRequest)
	}
	return nil
}

// Stream is r with a channel.
func (r CompleteRequest) Stream(channel string) StreamRequest {
	return StreamRequest{
		Channel:       channel,
		SystemPrompt:  r.SystemPrompt,
		Model:         r.Model,
		Messages:      r.Messages,
		Tools:         r.Tools,
		MaxTokens:     r.MaxTokens,
		ThinkingLevel: r.ThinkingLevel,
	}
}

// StreamResponse is the reply of provider::scripted::stream once the stream
// has ended: why the model stopped and, when it stopped with "error", the
// failure's kind. The answer itself went through the channel.
type StreamResponse struct {
	StopReason agent.StopReason `json:"stop_reason"`
	Kind       agent.ErrorKind  `json:"kind,omitempty"`
	// TranscriptKept names the transcript the worker kept: the caller
	// may send the next call of it as a continuation.
	TranscriptKept string `json:"transcript_kept,omitempty"`
}

// CompleteResponse is the reply of provider::scripted::complete: the final
// assistant message.
type CompleteResponse struct {
	Message agent.Message `json:"message"`
}
