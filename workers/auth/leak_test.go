package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Distinctive secrets: none may appear anywhere but in get_token's answers
// (and the vault file, whose job is to hold them).
const (
	leakKey     = "sk-leakKEY-9f3a7c1d5b"
	leakAccess  = "leakACCESS-4b1e88aa"
	leakRefresh = "leakREFRESH-77d2c3b0"
	leakEnv     = "leakENVKEY-c0ffee01"
	leakBad     = "leakREFUSED-5e5e0909" // refused by validation
	leakBadEnv  = "leakBADENV-ab12cd34"  // in a malformed env value
	leakCorrupt = "leakCORRUPT-0d0d0e0e" // in a vault that does not decode
)

var allLeaks = []string{leakKey, leakAccess, leakRefresh, leakEnv, leakBad, leakBadEnv, leakCorrupt}

// TestSecretsNeverLeak exercises every function and every error path with
// debug logging and span recording on, and looks for the secrets in the
// logs, the spans, the replies (but get_token's), the errors and the Go
// formatting of the request types.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	var logs enginetest.Buffer
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	env := newEnv("ANTHROPIC_API_KEY", leakEnv, "III_WEIRD_API_KEY", leakBadEnv+" x\x01")
	f := newFixture(t, env, []engine.Option{engine.WithLogger(debugLogger(&logs)), engine.WithTracerProvider(tp)},
		WithProviders("weird"))
	ctx := ctxT(t)

	var haystack strings.Builder // everything a secret must not be in
	add := func(what string, b []byte) { fmt.Fprintf(&haystack, "\n--- %s\n%s", what, b) }
	var granted []string // get_token answers: the one place secrets belong

	// call sends body in both codecs (JSON as is; msgpack re-encoded when
	// the body is JSON, raw otherwise) and collects replies and errors.
	call := func(fn string, body []byte, wantErr bool) {
		t.Helper()
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			b := body
			if codec == wire.Msgpack {
				var v any
				if json.Unmarshal(body, &v) == nil {
					var err error
					if b, err = wire.Msgpack.Marshal(v); err != nil {
						t.Fatal(err)
					}
				}
			}
			raw, _, err := f.e.TriggerRaw(ctx, fn, b, codec)
			if (err != nil) != wantErr {
				t.Fatalf("%s %s (%s): err = %v, want error %v", fn, body, codec.ContentType(), err, wantErr)
			}
			if err != nil {
				add(fn+" error", []byte(err.Error()))
				if we, ok := err.(*wire.Error); ok {
					d, _ := json.Marshal(we)
					add(fn+" error envelope", d)
				}
				continue
			}
			if fn == GetTokenFunction {
				granted = append(granted, string(raw))
				continue
			}
			add(fn+" reply", raw)
		}
	}
	jsonOf := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	set := func(p string, c agent.Credential) []byte {
		return jsonOf(SetTokenRequest{Provider: p, Credential: c})
	}

	// Happy paths.
	call(SetTokenFunction, set("anthropic", agent.Credential{Type: agent.CredentialAPIKey, Key: leakKey}), false)
	call(SetTokenFunction, set("corp", agent.Credential{Type: agent.CredentialOAuth, AccessToken: leakAccess, RefreshToken: leakRefresh, ExpiresAt: 1}), false)
	call(GetTokenFunction, []byte(`{"provider":"anthropic"}`), false)
	call(GetTokenFunction, []byte(`{"provider":"corp"}`), false)
	call(StatusFunction, []byte(`{}`), false)
	call(StatusFunction, []byte(`{"provider":"corp"}`), false)
	call(StatusFunction, []byte(`{"provider":"weird"}`), false)
	call(ListProvidersFunction, []byte(`{}`), false)
	call(DeleteTokenFunction, []byte(`{"provider":"anthropic"}`), false)
	call(GetTokenFunction, []byte(`{"provider":"anthropic"}`), false) // now from the env
	call(GetTokenFunction, []byte(`{"provider":"weird"}`), false)     // malformed env: null
	call(StatusFunction, []byte(`{}`), false)

	// Refused requests, each with a secret somewhere in it.
	refused := []struct {
		fn   string
		body string
	}{
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + leakBad + ` tail"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + leakBad + `\n"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + leakBad + `\u0000"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + strings.Repeat(leakBad, MaxKeyBytes/len(leakBad)+1) + `"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + leakBad + `","access_token":"` + leakBad + `"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"oauth","key":"` + leakBad + `","access_token":"` + leakBad + `"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"oauth","access_token":"` + leakBad + `","refresh_token":"` + leakBad + ` x"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"` + leakBad + `","key":"` + leakBad + `"}}`},
		{SetTokenFunction, `{"provider":"` + leakBad + `.x","credential":{"type":"api_key","key":"` + leakBad + `"}}`},
		{SetTokenFunction, `{"provider":"` + strings.Repeat("A", 200) + leakBad + `","credential":{"type":"api_key","key":"k"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"oauth","access_token":"a","expires_at":"` + leakBad + `"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":` + `12345` + `,"x":"` + leakBad + `"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + leakBad + `"}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":` + leakBad + `}}`},
		{SetTokenFunction, `{"provider":"p","credential":["` + leakBad + `"]}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + leakBad + `"}} "` + leakBad + `"`},
		{SetTokenFunction, leakBad},
		{GetTokenFunction, `{"provider":"` + leakBad + ` "}`},
		{DeleteTokenFunction, `{"provider":"` + leakBad + `/"}`},
		{StatusFunction, `{"provider":"` + leakBad + `*"}`},
		{StatusFunction, `{"provider":["` + leakBad + `"]}`},
	}
	for _, r := range refused {
		call(r.fn, []byte(r.body), true)
	}
	// Malformed msgpack around a secret.
	for _, b := range [][]byte{
		append([]byte{0x82, 0xa8}, []byte("provider"+leakBad)...),
		append(append([]byte{0x81, 0xa8}, "provider"...), append([]byte{0xd9, 0xff}, leakBad...)...),
	} {
		if _, _, err := f.e.TriggerRaw(ctx, SetTokenFunction, b, wire.Msgpack); err == nil {
			t.Fatal("malformed msgpack accepted")
		} else {
			add("msgpack error", []byte(err.Error()))
		}
	}

	// Vault failures: too open, then corrupt around a secret.
	if err := os.Chmod(f.path, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{GetTokenFunction, SetTokenFunction, DeleteTokenFunction, StatusFunction, ListProvidersFunction} {
		body := []byte(`{"provider":"corp"}`)
		if fn == SetTokenFunction {
			body = set("corp", agent.Credential{Type: agent.CredentialAPIKey, Key: leakBad})
		}
		call(fn, body, true)
	}
	if err := os.Chmod(f.path, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{
		`{"version":1,"credentials":{"p":{"type":"api_key","key":"` + leakCorrupt + `"}`,
		`{"version":1,"credentials":{"p":{"type":"api_key","key":` + leakCorrupt + `}}}`,
		`{"version":1,"credentials":{"p":{"type":"api_key","key":"` + leakCorrupt + ` x"}}}`,
		`{"version":1,"credentials":{"p":{"type":"oauth","access_token":"a","expires_at":"` + leakCorrupt + `"}}}`,
		`{"version":1,"credentials":{"` + leakCorrupt + `.":{"type":"api_key","key":"k"}}}`,
		`{"version":1,"credentials":{"p":{"type":"api_key","key":"k","` + leakCorrupt + `":1}}}`,
		`{"version":1,"credentials":{},"` + leakCorrupt + `":true}`,
		`{"version":1,"credentials":{"p":{"type":"` + leakCorrupt + `"}}}`,
	} {
		if err := os.WriteFile(f.path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, fn := range []string{GetTokenFunction, SetTokenFunction, StatusFunction, ListProvidersFunction} {
			body := []byte(`{"provider":"p"}`)
			if fn == SetTokenFunction {
				body = set("q", agent.Credential{Type: agent.CredentialAPIKey, Key: leakBad})
			}
			call(fn, body, true)
		}
		if _, err := OpenVault(f.path); err == nil {
			t.Fatalf("corrupt vault opened: %s", content)
		} else {
			add("OpenVault error", []byte(err.Error()))
		}
	}

	// Go-side formatting of the request and credential types.
	c := agent.Credential{Type: agent.CredentialOAuth, AccessToken: leakAccess, RefreshToken: leakRefresh}
	req := SetTokenRequest{Provider: "p", Credential: c}
	add("fmt", []byte(fmt.Sprintf("%v %+v %#v %s %v %+v", req, req, req, c, &req, []SetTokenRequest{req})))

	// Spans.
	for _, s := range rec.Ended() {
		add("span "+s.Name(), []byte(fmt.Sprint(s.Attributes(), s.Status(), s.Events())))
	}
	if len(rec.Ended()) == 0 {
		t.Fatal("no spans recorded")
	}
	add("logs", []byte(logs.String()))
	if !strings.Contains(logs.String(), "level=DEBUG") || !strings.Contains(logs.String(), "environment credential ignored") {
		t.Fatalf("debug logging did not run:\n%s", logs.String())
	}

	hay := haystack.String()
	for _, s := range allLeaks {
		if i := strings.Index(hay, s); i >= 0 {
			lo := strings.LastIndex(hay[:i], "\n--- ")
			t.Errorf("secret %s leaked (in %s)", s, strings.SplitN(hay[lo+5:], "\n", 2)[0])
		}
	}
	// A secret's fingerprint is fine; a truncated echo is not.
	for _, s := range allLeaks {
		if strings.Contains(hay, s[:10]) {
			t.Errorf("the 10-character prefix of %s leaked", s)
		}
	}
	// The answers that may hold secrets do.
	all := strings.Join(granted, "\n")
	for _, s := range []string{leakKey, leakAccess, leakRefresh, leakEnv} {
		if !strings.Contains(all, s) {
			t.Errorf("get_token never answered %s", s)
		}
	}
	if bytes.Contains([]byte(all), []byte(leakBadEnv)) {
		t.Error("get_token served a malformed environment value")
	}
}
