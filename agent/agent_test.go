package agent

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func validRun() RunStart {
	return RunStart{
		SessionID: "s1",
		Provider:  "anthropic",
		Model:     "claude-sonnet-4",
		Messages:  []Message{UserText("hello", 1)},
	}
}

func TestRunStartValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*RunStart)
		wantErr []error // nil: valid
	}{
		{"minimal", func(*RunStart) {}, nil},
		{"all optional fields", func(r *RunStart) {
			r.MessageID, r.Mode, r.MaxTurns, r.SystemPrompt = "m-1", ModeAgent, 8, "be brief"
			r.WorkspaceID, r.AgentID, r.IdempotencyKey = "ws_1", "ag-2", "0f8fad5b-d9cb-469f-a165-70867728950e"
			r.Model = "meta-llama/Llama-3.1-8B:latest"
		}, nil},
		{"mode plan", func(r *RunStart) { r.Mode = ModePlan }, nil},
		{"mode ask", func(r *RunStart) { r.Mode = ModeAsk }, nil},
		{"history with calls and results", func(r *RunStart) {
			r.Messages = append(r.Messages,
				Message{Role: RoleAssistant, Content: []Content{{Type: ContentFunctionCall, ID: "toolu_01", FunctionID: "fs::read"}}},
				TextResult("ok").Message("toolu_01", "fs::read", 2),
				UserText("thanks", 3))
		}, nil},
		{"id of 128 chars", func(r *RunStart) { r.SessionID = strings.Repeat("a", 128) }, nil},
		{"empty session id", func(r *RunStart) { r.SessionID = "" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"session id too long", func(r *RunStart) { r.SessionID = strings.Repeat("a", 129) }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"session id with two dots", func(r *RunStart) { r.SessionID = "a.b.c" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"session id with an empty region", func(r *RunStart) { r.SessionID = ".b" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"session id with wildcard", func(r *RunStart) { r.SessionID = "a*" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"session id with space", func(r *RunStart) { r.SessionID = "a b" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"session id non-ascii", func(r *RunStart) { r.SessionID = "sé" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"bad message id", func(r *RunStart) { r.MessageID = "m>1" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"bad workspace id", func(r *RunStart) { r.WorkspaceID = "w/1" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"bad agent id", func(r *RunStart) { r.AgentID = "a:1" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"bad idempotency key", func(r *RunStart) { r.IdempotencyKey = "k 1" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"missing provider", func(r *RunStart) { r.Provider = "" }, []error{ErrInvalidRunStart}},
		{"provider not an id", func(r *RunStart) { r.Provider = "open.ai" }, []error{ErrInvalidRunStart, ErrInvalidID}},
		{"missing model", func(r *RunStart) { r.Model = "" }, []error{ErrInvalidRunStart}},
		{"model with space", func(r *RunStart) { r.Model = "gpt 4" }, []error{ErrInvalidRunStart}},
		{"model too long", func(r *RunStart) { r.Model = strings.Repeat("m", 257) }, []error{ErrInvalidRunStart}},
		{"unknown mode", func(r *RunStart) { r.Mode = "yolo" }, []error{ErrInvalidRunStart}},
		{"negative max turns", func(r *RunStart) { r.MaxTurns = -1 }, []error{ErrInvalidRunStart}},
		{"no messages", func(r *RunStart) { r.Messages = nil }, []error{ErrInvalidRunStart}},
		{"empty messages", func(r *RunStart) { r.Messages = []Message{} }, []error{ErrInvalidRunStart}},
		{"unknown role", func(r *RunStart) { r.Messages[0].Role = "system" }, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"user without content", func(r *RunStart) { r.Messages[0].Content = nil }, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"content without type", func(r *RunStart) { r.Messages[0].Content[0].Type = "" }, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"unknown content type", func(r *RunStart) { r.Messages[0].Content[0].Type = "video" }, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"image without data", func(r *RunStart) {
			r.Messages[0].Content = []Content{{Type: ContentImage, Mime: "image/png"}}
		}, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"user with function call", func(r *RunStart) {
			r.Messages[0].Content = []Content{{Type: ContentFunctionCall, ID: "c1", FunctionID: "f::g"}}
		}, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"user with thinking", func(r *RunStart) {
			r.Messages[0].Content = []Content{{Type: ContentThinking, Text: "hm"}}
		}, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"function call without id", func(r *RunStart) {
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, Content: []Content{{Type: ContentFunctionCall, FunctionID: "f::g"}}})
		}, []error{ErrInvalidRunStart, ErrInvalidMessage, ErrInvalidID}},
		{"function call id with dot", func(r *RunStart) {
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, Content: []Content{{Type: ContentFunctionCall, ID: "c.1", FunctionID: "f::g"}}})
		}, []error{ErrInvalidRunStart, ErrInvalidMessage, ErrInvalidID}},
		{"function call without function id", func(r *RunStart) {
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, Content: []Content{{Type: ContentFunctionCall, ID: "c1"}}})
		}, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"duplicate call ids", func(r *RunStart) {
			call := Content{Type: ContentFunctionCall, ID: "c1", FunctionID: "f::g"}
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, Content: []Content{call, call}})
		}, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"unknown stop reason", func(r *RunStart) {
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, StopReason: "bored"})
		}, []error{ErrInvalidRunStart, ErrInvalidMessage}},
		{"result without call id", func(r *RunStart) {
			r.Messages = append(r.Messages, TextResult("x").Message("", "f::g", 1))
		}, []error{ErrInvalidRunStart, ErrInvalidMessage, ErrInvalidID}},
		{"result without function id", func(r *RunStart) {
			r.Messages = append(r.Messages, TextResult("x").Message("c1", "", 1))
		}, []error{ErrInvalidRunStart, ErrInvalidMessage}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := validRun()
			r.Messages = append([]Message(nil), r.Messages...)
			r.Messages[0].Content = append([]Content(nil), r.Messages[0].Content...)
			tt.mutate(&r)
			err := r.Validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("Validate() = %v, want it to wrap %v", err, want)
				}
			}
		})
	}
}

func TestValidateCallID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"toolu_01ABC", "call_abc-123", "c1", "x:y", "ünï", strings.Repeat("a", 128)} {
		if err := ValidateCallID(id); err != nil {
			t.Errorf("ValidateCallID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "a/b", "a.b", "a*", "a>", "a b", "a\tb", "a\x00", "\xff", strings.Repeat("a", 129)} {
		if err := ValidateCallID(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ValidateCallID(%q) = %v, want ErrInvalidID", id, err)
		}
	}
}

func TestModelEventValidate(t *testing.T) {
	t.Parallel()
	asst := &Message{Role: RoleAssistant, Content: []Content{Text("hi")}, StopReason: StopEnd}
	call := &Content{Type: ContentFunctionCall, ID: "c1", FunctionID: "fs::read"}
	tests := []struct {
		name string
		ev   ModelEvent
		ok   bool
	}{
		{"start", ModelEvent{Type: ModelStart}, true},
		{"text delta", ModelEvent{Type: ModelTextDelta, Index: 1, Delta: "he"}, true},
		{"thinking end", ModelEvent{Type: ModelThinkingEnd, Content: &Content{Type: ContentThinking, Text: "t"}}, true},
		{"functioncall start", ModelEvent{Type: ModelFunctionCallStart, ID: "c1", FunctionID: "fs::read"}, true},
		{"functioncall end", ModelEvent{Type: ModelFunctionCallEnd, Content: call}, true},
		{"usage", ModelEvent{Type: ModelUsage, Usage: &Usage{InputTokens: 3}}, true},
		{"stop", ModelEvent{Type: ModelStop, StopReason: StopFunctionCall}, true},
		{"done", ModelEvent{Type: ModelDone, Message: asst}, true},
		{"error", ModelEvent{Type: ModelError, Kind: ErrorRateLimited, Error: "slow down", RetryAfterMs: 500}, true},
		{"unknown type", ModelEvent{Type: "ping"}, false},
		{"negative index", ModelEvent{Type: ModelTextDelta, Index: -1}, false},
		{"done without message", ModelEvent{Type: ModelDone}, false},
		{"done with user message", ModelEvent{Type: ModelDone, Message: &Message{Role: RoleUser, Content: []Content{Text("x")}}}, false},
		{"done with bad block", ModelEvent{Type: ModelDone, Message: &Message{Role: RoleAssistant, Content: []Content{{Type: "?"}}}}, false},
		{"error without kind", ModelEvent{Type: ModelError, Error: "x"}, false},
		{"error unknown kind", ModelEvent{Type: ModelError, Kind: "meh"}, false},
		{"stop without reason", ModelEvent{Type: ModelStop}, false},
		{"functioncall start bad id", ModelEvent{Type: ModelFunctionCallStart, ID: "a b"}, false},
		{"functioncall end without block", ModelEvent{Type: ModelFunctionCallEnd}, false},
		{"functioncall end text block", ModelEvent{Type: ModelFunctionCallEnd, Content: &Content{Type: ContentText}}, false},
		{"usage without usage", ModelEvent{Type: ModelUsage}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.ev.Validate()
			if tt.ok && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidModelEvent) {
				t.Fatalf("Validate() = %v, want ErrInvalidModelEvent", err)
			}
		})
	}
}

func TestEnumsValid(t *testing.T) {
	t.Parallel()
	for _, s := range []StopReason{StopEnd, StopLength, StopFunctionCall, StopAborted, StopError, StopBudgetExceeded} {
		if !s.Valid() {
			t.Errorf("%q not valid", s)
		}
	}
	for _, k := range []ErrorKind{ErrorAuthExpired, ErrorRateLimited, ErrorContextOverflow, ErrorTransient, ErrorPermanent} {
		if !k.Valid() {
			t.Errorf("%q not valid", k)
		}
	}
	for _, e := range []EventType{EventTurnStateChanged, EventMessageUpdate, EventMessageComplete, EventFunctionExecutionStart,
		EventFunctionExecutionEnd, EventApprovalRequested, EventTurnEnd, EventCompactionDone, EventAgentEnd} {
		if !e.Valid() {
			t.Errorf("%q not valid", e)
		}
	}
	terminal := map[TurnState]bool{StateStopped: true, StateFailed: true}
	for _, s := range []TurnState{StateProvisioning, StateAssistantStreaming, StateFunctionExecute,
		StateFunctionAwaitingApproval, StateSteeringCheck, StateStopped, StateFailed} {
		if !s.Valid() || s.Terminal() != terminal[s] {
			t.Errorf("%q: Valid=%v Terminal=%v", s, s.Valid(), s.Terminal())
		}
	}
	if StopReason("x").Valid() || ErrorKind("").Valid() || EventType("x").Valid() || TurnState("x").Valid() || Role("x").Valid() || ContentType("x").Valid() || Mode("x").Valid() {
		t.Error("an unknown value is valid")
	}
	if !ErrorTransient.Retryable() || !ErrorRateLimited.Retryable() || ErrorPermanent.Retryable() || ErrorAuthExpired.Retryable() {
		t.Error("Retryable is wrong")
	}
}

func TestFunctionCalls(t *testing.T) {
	t.Parallel()
	m := Message{Role: RoleAssistant, Content: []Content{
		Text("let me look"),
		{Type: ContentFunctionCall, ID: "c2", FunctionID: "fs::read", Arguments: map[string]any{"path": "/a"}},
		{Type: ContentThinking, Text: "hm"},
		{Type: ContentFunctionCall, ID: "c1", FunctionID: "shell::exec"},
	}}
	got := m.FunctionCalls()
	want := []FunctionCall{
		{ID: "c2", FunctionID: "fs::read", Arguments: map[string]any{"path": "/a"}},
		{ID: "c1", FunctionID: "shell::exec"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FunctionCalls() = %+v, want %+v", got, want)
	}
	if calls := UserText("x", 0).FunctionCalls(); calls != nil {
		t.Fatalf("FunctionCalls() of a user message = %v, want nil", calls)
	}
}

func TestUsageAdd(t *testing.T) {
	t.Parallel()
	got := Usage{1, 2, 3, 4, 0.5}.Add(Usage{10, 20, 30, 40, 0.25})
	if want := (Usage{11, 22, 33, 44, 0.75}); got != want {
		t.Fatalf("Add = %+v, want %+v", got, want)
	}
}

// TestWireNames pins the JSON field names to SPEC §4–§6.
func TestWireNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"user message", UserText("hi", 5), `{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":5}`},
		{"assistant message", Message{
			Role: RoleAssistant, Timestamp: 7, StopReason: StopFunctionCall, Model: "m", Provider: "p",
			Usage:   &Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4, CostUSD: 0.5},
			Content: []Content{{Type: ContentFunctionCall, ID: "c1", FunctionID: "fs::read", Arguments: map[string]any{"path": "/x"}}},
		}, `{"role":"assistant","content":[{"type":"function_call","id":"c1","function_id":"fs::read","arguments":{"path":"/x"}}],"timestamp":7,"stop_reason":"function_call","usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4,"cost_usd":0.5},"model":"m","provider":"p"}`},
		{"function result message", FunctionResult{Content: []Content{{Type: ContentImage, Mime: "image/png", Data: "iVBO"}}, Details: map[string]any{"n": 1}, IsError: true}.Message("c1", "fs::read", 9),
			`{"role":"function_result","content":[{"type":"image","mime":"image/png","data":"iVBO"}],"timestamp":9,"function_call_id":"c1","function_id":"fs::read","details":{"n":1},"is_error":true}`},
		{"function result", FunctionResult{Content: []Content{Text("ok")}, Terminate: true}, `{"content":[{"type":"text","text":"ok"}],"is_error":false,"terminate":true}`},
		{"denial", Denial{Status: StatusDenied, DeniedBy: DeniedByUser, FunctionID: "f::g", Reason: "no"}, `{"status":"denied","denied_by":"user","function_id":"f::g","reason":"no"}`},
		{"model event error", ModelEvent{Type: ModelError, Kind: ErrorContextOverflow, Error: "too long"}, `{"type":"error","kind":"context_overflow","error":"too long"}`},
		{"run start", RunStart{SessionID: "s", MessageID: "m", Provider: "p", Model: "x", Mode: ModeAsk, MaxTurns: 3,
			SystemPrompt: "sp", WorkspaceID: "w", AgentID: "a", IdempotencyKey: "k", Messages: []Message{}},
			`{"session_id":"s","message_id":"m","provider":"p","model":"x","mode":"ask","messages":[],"max_turns":3,"system_prompt":"sp","workspace_id":"w","agent_id":"a","idempotency_key":"k"}`},
		{"turn_state_changed", Event{Type: EventTurnStateChanged, SessionID: "s", Seq: 4, TS: 10, State: StateSteeringCheck,
			View: &TurnView{SessionID: "s", RunID: "r", State: StateSteeringCheck, Step: 3, TurnCount: 1, StartedAtMs: 1, UpdatedAtMs: 10,
				AwaitingApproval: []PendingApproval{{FunctionCallID: "c1", FunctionID: "f::g", ArgsHash: "h", RequestedAt: 9}}}},
			`{"type":"turn_state_changed","session_id":"s","seq":4,"ts":10,"state":"steering_check","view":{"session_id":"s","run_id":"r","state":"steering_check","step":3,"turn_count":1,"awaiting_approval":[{"function_call_id":"c1","function_id":"f::g","args_hash":"h","requested_at":9}],"started_at_ms":1,"updated_at_ms":10}}`},
		{"function_execution_end", Event{Type: EventFunctionExecutionEnd, SessionID: "s", FunctionCallID: "c1", Result: &FunctionResult{IsError: true}, IsError: true, DurationMs: 12},
			`{"type":"function_execution_end","session_id":"s","seq":0,"ts":0,"function_call_id":"c1","result":{"content":null,"is_error":true},"is_error":true,"duration_ms":12}`},
		{"message_update", Event{Type: EventMessageUpdate, SessionID: "s", Delta: "he", Partial: &Message{Role: RoleAssistant, Content: []Content{Text("he")}}},
			`{"type":"message_update","session_id":"s","seq":0,"ts":0,"delta":"he","partial":{"role":"assistant","content":[{"type":"text","text":"he"}]}}`},
		{"agent_end", Event{Type: EventAgentEnd, SessionID: "s", StopReason: StopAborted}, `{"type":"agent_end","session_id":"s","seq":0,"ts":0,"stop_reason":"aborted"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("json =\n%s\nwant\n%s", b, tt.want)
			}
		})
	}
}

// roundTrip decodes the JSON of v into a new value of v's type, through
// JSON and through msgpack with the json tags (the settings of
// engine/wire), and checks both give v back.
func roundTrip[T any](t *testing.T, v T) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON T
	if err := json.Unmarshal(b, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, v) {
		t.Fatalf("json round trip:\n got %#v\nwant %#v", fromJSON, v)
	}
	mp, err := msgpackMarshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var fromMP T
	if err := msgpackUnmarshal(mp, &fromMP); err != nil {
		t.Fatal(err)
	}
	// msgpack keeps integer types inside `any`; compare through JSON.
	b2, err := json.Marshal(fromMP)
	if err != nil {
		t.Fatal(err)
	}
	if string(b2) != string(b) {
		t.Fatalf("msgpack round trip:\n got %s\nwant %s", b2, b)
	}
}

func msgpackMarshal(v any) ([]byte, error) {
	var buf strings.Builder
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	err := enc.Encode(v)
	return []byte(buf.String()), err
}

func msgpackUnmarshal(b []byte, v any) error {
	dec := msgpack.NewDecoder(strings.NewReader(string(b)))
	dec.SetCustomStructTag("json")
	dec.SetMapDecoder(stringMap)
	return dec.Decode(v)
}

// stringMap decodes untyped maps as map[string]any, as engine/wire does.
func stringMap(d *msgpack.Decoder) (any, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n == -1 {
		return nil, err
	}
	m := make(map[string]any, n)
	for range n {
		k, err := d.DecodeString()
		if err != nil {
			return nil, err
		}
		if m[k], err = d.DecodeInterface(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	args := map[string]any{"path": "/tmp/x", "n": int64(2), "deep": map[string]any{"ok": true, "list": []any{"a", 1.5}}}
	asst := Message{
		Role: RoleAssistant, Timestamp: 11, StopReason: StopFunctionCall, Model: "m", Provider: "p",
		Usage: &Usage{InputTokens: 10, OutputTokens: 20, CostUSD: 0.001},
		Content: []Content{
			{Type: ContentThinking, Text: "plan"},
			Text("calling"),
			{Type: ContentFunctionCall, ID: "c1", FunctionID: "fs::read", Arguments: args},
		},
	}
	result := FunctionResult{Content: []Content{Text("data")}, Details: map[string]any{"bytes": 4.0}, Terminate: true}
	t.Run("message", func(t *testing.T) { roundTrip(t, asst) })
	t.Run("error message", func(t *testing.T) {
		roundTrip(t, Message{Role: RoleAssistant, StopReason: StopError, ErrorMessage: "boom", Content: []Content{}})
	})
	t.Run("result message", func(t *testing.T) { roundTrip(t, result.Message("c1", "fs::read", 12)) })
	t.Run("function result", func(t *testing.T) { roundTrip(t, result) })
	t.Run("run start", func(t *testing.T) {
		r := validRun()
		r.Mode, r.MaxTurns, r.MessageID = ModePlan, 4, "m1"
		roundTrip(t, r)
	})
	t.Run("model events", func(t *testing.T) {
		for _, ev := range []ModelEvent{
			{Type: ModelTextDelta, Index: 2, Delta: "x"},
			{Type: ModelFunctionCallEnd, Index: 1, Content: &asst.Content[2]},
			{Type: ModelUsage, Usage: &Usage{OutputTokens: 7}},
			{Type: ModelDone, Message: &asst},
			{Type: ModelError, Kind: ErrorTransient, Error: "eof", RetryAfterMs: 10, Message: &Message{Role: RoleAssistant, Content: []Content{Text("part")}}},
		} {
			roundTrip(t, ev)
		}
	})
	t.Run("events", func(t *testing.T) {
		view := &TurnView{SessionID: "s", RunID: "r", State: StateFunctionAwaitingApproval, Step: 9, TurnCount: 2, MaxTurns: 5,
			AwaitingApproval: []PendingApproval{{FunctionCallID: "c1", FunctionID: "fs::read", Args: args, ArgsHash: "h", RequestedAt: 3}},
			StopReason:       StopError, Error: &Failure{Kind: ErrorPermanent, Message: "x"}}
		rm := result.Message("c1", "fs::read", 12)
		for _, ev := range []Event{
			{Type: EventTurnStateChanged, SessionID: "s", Seq: 1, TS: 2, State: StateFunctionAwaitingApproval, View: view},
			{Type: EventMessageUpdate, SessionID: "s", Delta: "d", Partial: &asst},
			{Type: EventMessageComplete, SessionID: "s", Message: &asst},
			{Type: EventFunctionExecutionStart, SessionID: "s", FunctionCallID: "c1", FunctionID: "fs::read", Args: args},
			{Type: EventFunctionExecutionEnd, SessionID: "s", FunctionCallID: "c1", Result: &result, IsError: true, DurationMs: 5},
			{Type: EventApprovalRequested, SessionID: "s", FunctionCallID: "c1", FunctionID: "fs::read", Args: args},
			{Type: EventTurnEnd, SessionID: "s", Message: &asst, FunctionResults: []Message{rm}},
			{Type: EventCompactionDone, SessionID: "s"},
			{Type: EventAgentEnd, SessionID: "s", StopReason: StopBudgetExceeded},
		} {
			roundTrip(t, ev)
		}
	})
}
