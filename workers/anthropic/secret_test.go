package anthropic_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

// TestSecretNeverLeaks runs streams, completes and model listings against
// a fake API that fails in every way, echoing the key in its error texts,
// and checks that the key appears in no frame, no reply, no error and no
// log line.
func TestSecretNeverLeaks(t *testing.T) {
	t.Parallel()
	echo := func(status int, typ string) response {
		r := apiError(status, typ, "request with key "+testKey+" refused")
		r.header = map[string]string{"Retry-After": "0", "X-Echo": testKey}
		return r
	}
	text := sse(t, "text")
	failures := []response{
		echo(401, "authentication_error"),
		echo(403, "permission_error"),
		echo(429, "rate_limit_error"),
		echo(400, "invalid_request_error"),
		echo(500, "api_error"),
		echo(529, "overloaded_error"),
		{status: 502, body: "<html>bad gateway for " + testKey + "</html>"},
		ok(strings.Replace(text, "event: content_block_stop", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"key "+testKey+"\"}}\n\nevent: content_block_stop", 1)),
		ok(sse(t, "bad_input")),
		{status: 200, body: text, cut: 60},
		{status: 200, body: text, cut: len(text) - 40},
	}
	for i, f := range failures {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, f)
			en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithMaxRetries(1)}})
			var seen strings.Builder
			req := userReq("Hello")
			req.Tools = weatherTools
			res := en.stream(t, req, nil)
			b, _ := json.Marshal(res)
			seen.Write(b)
			fmt.Fprint(&seen, res.end, res.err)
			_, err := engine.Call[anthropic.CompleteResponse](t.Context(), en.e, anthropic.CompleteFunction, anthropic.CompleteRequest(req))
			fmt.Fprint(&seen, err)
			_, err = engine.Call[anthropic.ModelsResponse](t.Context(), en.e, anthropic.ModelsFunction, struct{}{})
			fmt.Fprint(&seen, err)
			seen.WriteString(en.logs.String())
			if strings.Contains(seen.String(), testKey) {
				t.Fatalf("the key leaked:\n%s", seen.String())
			}
			if len(api.received()) == 0 || api.received()[0].header.Get("X-Api-Key") != testKey {
				t.Fatal("the fake API never saw the key: the test proves nothing")
			}
			if res.Reply.StopReason != agent.StopError && f.status != 200 {
				t.Fatalf("reply %+v", res.Reply)
			}
		})
	}
}

// A base URL refused at start-up does not quote what may be a secret: a
// gateway's query key, the password of user info (refused first, whatever
// else is wrong with the URL).
func TestBaseURLErrorHidesSecrets(t *testing.T) {
	t.Parallel()
	const secret = "QSECRETq7w8e9r0t1y2u3i4o5"
	for _, base := range []string{
		"https://gateway.example/anthropic?key=" + secret,
		"ftp://user:" + secret + "@gateway.example/",
		"https://user:" + secret + "@gateway.example/",
		"https://gateway.example/anthropic#" + secret,
		"%zz" + secret,
	} {
		_, err := anthropic.New(anthropic.WithBaseURL(base))
		if err == nil || !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("%s: error %v, want ErrInvalidOption", base, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
}
