package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/openai"
)

func TestCredentialSources(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	ok := func(w http.ResponseWriter, r *http.Request, _ int) { serveSSE(w, body, -1) }
	cases := []struct {
		name string
		cfg  config
		auth string // the Authorization header the server must see
	}{
		{name: "auth worker", cfg: config{auth: authKey, env: map[string]string{"OPENAI_API_KEY": envKey}}, auth: "Bearer " + testKey},
		{name: "no auth worker", cfg: config{auth: authAbsent, env: map[string]string{"OPENAI_API_KEY": envKey}}, auth: "Bearer " + envKey},
		{name: "null credential", cfg: config{auth: authNull, env: map[string]string{"OPENAI_API_KEY": envKey}}, auth: "Bearer " + envKey},
		{name: "own variable", cfg: config{auth: authAbsent, env: map[string]string{"OPENAI_API_KEY": "wrong-key-123456", "MOONSHOT_API_KEY": envKey},
			opts: nil}, auth: "Bearer " + envKey},
		{name: "keyless", cfg: config{auth: authAbsent, opts: []openai.Option{openai.WithRequireKey(false)}}, auth: ""},
	}
	cases[3].cfg.opts = []openai.Option{openai.WithAPIKeyEnv("MOONSHOT_API_KEY")}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, ok, tc.cfg)
			succeeded(t, ev.stream(t, userReq("hi")))
			if got := ev.api.requests()[0].Header.Get("Authorization"); got != tc.auth {
				t.Fatalf("Authorization %q, want %q", got, tc.auth)
			}
		})
	}
}

func TestNoCredential(t *testing.T) {
	t.Parallel()
	for _, mode := range []authMode{authNull, authAbsent} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			t.Parallel()
			ev := setup(t, sse(t, "text.sse"), config{auth: mode})
			e := onlyError(t, ev.stream(t, userReq("hi")), agent.ErrorAuthExpired)
			if !strings.Contains(e.Error, "OPENAI_API_KEY") || !strings.Contains(e.Error, openai.AuthFunction) {
				t.Fatalf("error text %q does not say where credentials come from", e.Error)
			}
			if n := len(ev.api.requests()); n != 0 {
				t.Fatalf("%d requests without a credential", n)
			}
		})
	}
}

// TestAuthFailing: an auth worker that fails is a transient failure,
// retried like one.
func TestAuthFailing(t *testing.T) {
	t.Parallel()
	ev := setup(t, sse(t, "text.sse"), config{auth: authFail, env: map[string]string{"OPENAI_API_KEY": envKey}})
	e := onlyError(t, ev.stream(t, userReq("hi")), agent.ErrorTransient)
	if !strings.Contains(e.Error, "auth store broken") || ev.auth.calls.Load() != 3 || len(ev.api.requests()) != 0 {
		t.Fatalf("error %q, %d auth calls, %d requests", e.Error, ev.auth.calls.Load(), len(ev.api.requests()))
	}
}

// gatewaySecret is a configured header value: a secret too.
const gatewaySecret = "gw-secret-7c6b5a49"

// TestSecretNeverLeaks runs streams, completes and model lists against a
// server that fails in every way and echoes the credential and the
// configured header everywhere it can; neither may appear in any frame,
// reply, error or log line.
func TestSecretNeverLeaks(t *testing.T) {
	t.Parallel()
	echo := func(r *http.Request) string {
		return "key " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + " gateway " + r.Header.Get("X-Gateway-Key")
	}
	handlers := map[string]func(w http.ResponseWriter, r *http.Request, n int){
		"401": func(w http.ResponseWriter, r *http.Request, _ int) {
			jsonError(w, http.StatusUnauthorized, map[string]string{"X-Echo": echo(r)}, "Incorrect API key provided: "+echo(r), "invalid_request_error", "invalid_api_key")
		},
		"429": func(w http.ResponseWriter, r *http.Request, _ int) {
			jsonError(w, http.StatusTooManyRequests, map[string]string{"Retry-After": "0"}, "slow down, "+echo(r), "requests", "rate_limit_exceeded")
		},
		"500 text": func(w http.ResponseWriter, r *http.Request, _ int) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("panic: " + echo(r)))
		},
		"400 overflow": func(w http.ResponseWriter, r *http.Request, _ int) {
			jsonError(w, http.StatusBadRequest, nil, "maximum context length exceeded for "+echo(r), "invalid_request_error", "context_length_exceeded")
		},
		"error chunk": func(w http.ResponseWriter, r *http.Request, _ int) {
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": echo(r), "type": "server_error"}})
			serveSSE(w, []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: "+string(b)+"\n\n"), -1)
		},
		"malformed chunk": func(w http.ResponseWriter, r *http.Request, _ int) {
			serveSSE(w, []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {"+echo(r)+"\n\n"), -1)
		},
		"bad arguments": func(w http.ResponseWriter, r *http.Request, _ int) {
			// What the model writes is content, not an error path: the
			// arguments carry no secret here.
			args, _ := json.Marshal("not json")
			serveSSE(w, []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"a__b\",\"arguments\":"+
				string(args)+"}}]}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"), -1)
		},
		"hang up": func(w http.ResponseWriter, r *http.Request, _ int) { hangUp(w) },
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, h, config{opts: []openai.Option{
				openai.WithHeader("X-Gateway-Key", gatewaySecret), openai.WithMaxRetries(1),
			}})
			var texts []string
			res := ev.stream(t, userReq("hi"))
			if res.resp.StopReason != agent.StopError || last(res.events).Type != agent.ModelError {
				t.Fatalf("reply %+v, events %v", res.resp, types(res.events))
			}
			for _, f := range res.frames {
				texts = append(texts, string(f))
			}
			for _, e := range res.events {
				b, _ := json.Marshal(e)
				texts = append(texts, string(b))
			}
			rb, _ := json.Marshal(res.resp)
			texts = append(texts, string(rb), fmt.Sprint(res.err), fmt.Sprint(res.end))

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := engine.Call[openai.CompleteResponse](ctx, ev.e, ev.p.CompleteFunction(), userReq("hi"))
			if err == nil {
				t.Fatal("complete succeeded against a failing server")
			}
			texts = append(texts, err.Error(), fmt.Sprintf("%+v %#v", err, err))
			_, err = engine.Call[openai.ModelsResponse](ctx, ev.e, ev.p.ModelsFunction(), openai.ModelsRequest{})
			texts = append(texts, fmt.Sprint(err))
			texts = append(texts, ev.logs.String())

			if !strings.Contains(echo(&http.Request{Header: ev.api.requests()[0].Header}), testKey) {
				t.Fatal("the fake server did not see the key: the test proves nothing")
			}
			for _, secret := range []string{testKey, gatewaySecret} {
				if contains(secret, texts...) {
					t.Fatalf("secret %q leaked:\n%s", secret, strings.Join(texts, "\n"))
				}
			}
			if !strings.Contains(ev.logs.String(), "[redacted]") && name != "hang up" && name != "malformed chunk" && name != "bad arguments" {
				t.Errorf("no redaction in the logs:\n%s", ev.logs.String())
			}
		})
	}
}
