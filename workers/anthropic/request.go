package anthropic

import (
	"fmt"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// Bounds of a request.
const (
	// maxModelLen bounds a model name, as agent.RunStart does.
	maxModelLen = 256
	// maxOutputTokens bounds max_tokens (no model comes near it).
	maxOutputTokens = 1 << 20
)

// Thinking levels of agent.ProviderRequest.
const (
	ThinkingOff    = "off"
	ThinkingLow    = "low"
	ThinkingMedium = "medium"
	ThinkingHigh   = "high"
)

// StreamRequest is the payload of provider::anthropic::stream: an
// agent.ProviderRequest whose Channel names the channel the caller opened
// and reads.
type StreamRequest agent.ProviderRequest

// Validate checks r: a channel id of 1–128 characters of [A-Za-z0-9_-] and
// everything [CompleteRequest.Validate] checks. Errors wrap
// [ErrInvalidRequest].
func (r StreamRequest) Validate() error {
	if err := subjects.ValidateID("channel", r.Channel); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return CompleteRequest(r).Validate()
}

// CompleteRequest is the payload of provider::anthropic::complete: an
// agent.ProviderRequest whose Channel, if any, is ignored.
type CompleteRequest agent.ProviderRequest

// Validate checks r: a model name of 1–256 bytes, at least one message,
// each valid (agent.Message.Validate), tools with function ids,
// 0 ≤ max_tokens ≤ 2^20, a known thinking level ("", "off", "low",
// "medium", "high") and a session id that is empty or valid
// (agent.ValidateSessionID). Errors wrap [ErrInvalidRequest].
func (r CompleteRequest) Validate() error {
	if r.SessionID != "" {
		if err := agent.ValidateSessionID(r.SessionID); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
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
	for i, t := range r.Tools {
		if t.FunctionID == "" {
			return fmt.Errorf("%w: tools[%d]: function_id is missing", ErrInvalidRequest, i)
		}
	}
	if r.MaxTokens < 0 || r.MaxTokens > maxOutputTokens {
		return fmt.Errorf("%w: max_tokens %d must be 0..%d", ErrInvalidRequest, r.MaxTokens, maxOutputTokens)
	}
	switch r.ThinkingLevel {
	case "", ThinkingOff, ThinkingLow, ThinkingMedium, ThinkingHigh:
	default:
		return fmt.Errorf("%w: unknown thinking_level %q (want off, low, medium or high)", ErrInvalidRequest, r.ThinkingLevel)
	}
	return nil
}

// StreamResponse is the reply of provider::anthropic::stream once the
// stream has ended: why the model stopped and, when it stopped with
// "error", the failure's kind. The answer itself went through the channel.
type StreamResponse struct {
	StopReason agent.StopReason `json:"stop_reason"`
	Kind       agent.ErrorKind  `json:"kind,omitempty"`
	// TranscriptKept names the transcript the worker kept: the caller
	// may send the next call of it as a continuation
	// ([agent.TranscriptRef]).
	TranscriptKept string `json:"transcript_kept,omitempty"`
}

// ModelsRequest is the payload of provider::anthropic::models: an empty
// object.
type ModelsRequest struct{}

// ModelsResponse is the reply of provider::anthropic::models: the models
// GET /v1/models lists, in the API's order (newest first).
type ModelsResponse struct {
	Models []ModelInfo `json:"models"`
}

// ModelInfo is one model of [ModelsResponse]. CreatedAt is RFC 3339;
// ContextWindow and MaxOutputTokens are set when the API reports them.
type ModelInfo struct {
	ID              string `json:"id"`
	DisplayName     string `json:"display_name,omitempty"`
	CreatedAt       string `json:"created_at,omitempty"`
	ContextWindow   int64  `json:"context_window,omitempty"`
	MaxOutputTokens int64  `json:"max_output_tokens,omitempty"`
}
