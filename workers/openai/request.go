package openai

import (
	"encoding/json"
	"fmt"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// maxModelLen bounds a model name, as agent.RunStart does.
const maxModelLen = 256

// maxTools bounds the tools of one request (OpenAI accepts 128).
const maxTools = 512

// ValidateRequest checks the payload of provider::<name>::stream (stream
// true: it needs a channel id of 1–128 characters of [A-Za-z0-9_-]) or
// ::complete: a model name, at least one message, each valid, max_tokens
// ≥ 0, a known thinking level ("", off, low, medium, high), tools with
// valid function ids and a session id that is empty or valid
// (agent.ValidateSessionID). Errors wrap [ErrInvalidRequest].
func ValidateRequest(req agent.ProviderRequest, stream bool) error {
	if stream {
		if err := subjects.ValidateID("channel", req.Channel); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	if req.SessionID != "" {
		if err := agent.ValidateSessionID(req.SessionID); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	if req.Model == "" {
		return fmt.Errorf("%w: model is missing", ErrInvalidRequest)
	}
	if len(req.Model) > maxModelLen {
		return fmt.Errorf("%w: model is longer than %d bytes", ErrInvalidRequest, maxModelLen)
	}
	if len(req.Messages) == 0 {
		return fmt.Errorf("%w: no messages", ErrInvalidRequest)
	}
	for i, m := range req.Messages {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%w: messages[%d]: %w", ErrInvalidRequest, i, err)
		}
		for j, c := range m.Content {
			if c.Type == agent.ContentFunctionCall && len(c.Arguments) > 0 {
				if _, err := json.Marshal(c.Arguments); err != nil {
					return fmt.Errorf("%w: messages[%d].content[%d]: arguments do not encode as JSON: %v", ErrInvalidRequest, i, j, err)
				}
			}
		}
	}
	if req.MaxTokens < 0 {
		return fmt.Errorf("%w: max_tokens is negative", ErrInvalidRequest)
	}
	switch req.ThinkingLevel {
	case "", "off", "low", "medium", "high":
	default:
		return fmt.Errorf("%w: thinking_level %q must be off, low, medium or high", ErrInvalidRequest, req.ThinkingLevel)
	}
	if len(req.Tools) > maxTools {
		return fmt.Errorf("%w: %d tools, at most %d", ErrInvalidRequest, len(req.Tools), maxTools)
	}
	for i, t := range req.Tools {
		c := agent.Content{Type: agent.ContentFunctionCall, ID: "x", FunctionID: t.FunctionID}
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%w: tools[%d]: function_id %q is not a valid function id", ErrInvalidRequest, i, t.FunctionID)
		}
		if len(t.InputSchema) > 0 {
			if _, err := json.Marshal(t.InputSchema); err != nil {
				return fmt.Errorf("%w: tools[%d]: input_schema does not encode as JSON: %v", ErrInvalidRequest, i, err)
			}
		}
	}
	return nil
}

// StreamResponse is the reply of provider::<name>::stream once the stream
// has ended: why the model stopped and, when it stopped with "error", the
// failure's kind. The answer itself went through the channel.
type StreamResponse struct {
	StopReason agent.StopReason `json:"stop_reason"`
	Kind       agent.ErrorKind  `json:"kind,omitempty"`
	// TranscriptKept names the transcript the worker kept: the caller
	// may send the next call of it as a continuation
	// ([agent.TranscriptRef]).
	TranscriptKept string `json:"transcript_kept,omitempty"`
}

// CompleteResponse is the reply of provider::<name>::complete: the final
// assistant message.
type CompleteResponse struct {
	Message agent.Message `json:"message"`
}

// ModelsRequest is the (empty) payload of provider::<name>::models.
type ModelsRequest struct{}

// ModelsResponse is the reply of provider::<name>::models: the models the
// server lists at GET <base_url>/models, in its order.
type ModelsResponse struct {
	Models []ModelInfo `json:"models"`
}

// ModelInfo is one model a server serves. CreatedAt is in Unix
// milliseconds (0 when the server does not say); DisplayName is set only
// by servers that send one.
type ModelInfo struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
	CreatedAt   int64  `json:"created_at,omitempty"`
}
