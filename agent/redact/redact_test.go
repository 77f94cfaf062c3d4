package redact_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent/redact"
)

const (
	anthropicKey = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-AbCdEf"
	openAIKey    = "sk-proj-AbCdEfGhIjKlMnOpQrSt1234"
	awsKey       = "AKIAIOSFODNN7EXAMPLE"
	githubToken  = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	slackToken   = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	jwt          = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
	pemKey       = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\nabcd==\n-----END RSA PRIVATE KEY-----"
)

// decode parses JSON the way the harness does (numbers as json.Number).
func decode(t testing.TB, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

func encode(t testing.TB, v any) string {
	t.Helper()
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		t.Fatalf("encode %#v: %v", v, err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func TestValueJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"api key", `{"path":"/x","api_key":"` + anthropicKey + `"}`, `{"api_key":"[redacted]","path":"/x"}`},
		{"key styles", `{"API-Key":"a","apiKey":"b","X-Api-Key":"c","client.secret":"d","Authorization":"e","name":"f"}`,
			`{"API-Key":"[redacted]","Authorization":"[redacted]","X-Api-Key":"[redacted]","apiKey":"[redacted]","client.secret":"[redacted]","name":"f"}`},
		{"nested lists of objects", `{"a":{"b":[{"password":"p1","user":"u"},{"name":"n"},[{"token":"t"}]]}}`,
			`{"a":{"b":[{"password":"[redacted]","user":"u"},{"name":"n"},[{"token":"[redacted]"}]]}}`},
		{"containers under secret keys", `{"credentials":{"user":"u","pass":"p"},"cookies":["a=1","b=2"]}`,
			`{"cookies":"[redacted]","credentials":"[redacted]"}`},
		{"counts are kept", `{"max_tokens":1024,"tokens":10,"token_count":3,"maxOutputTokens":5,"token_limit":7,"input_tokens":1.5}`,
			`{"input_tokens":1.5,"maxOutputTokens":5,"max_tokens":1024,"token_count":3,"token_limit":7,"tokens":10}`},
		{"numbers that are secrets", `{"pin":1234,"otp":123456,"token":42,"max_tokens":"1024"}`,
			`{"max_tokens":"[redacted]","otp":"[redacted]","pin":"[redacted]","token":"[redacted]"}`},
		{"null and bools are kept", `{"password":null,"has_password":true,"auth":false}`,
			`{"auth":false,"has_password":true,"password":null}`},
		{"false positives", `{"tokenizer":"cl100k","spinner":"dots","author":"ann","pinned":"v1","footprint":"3kb","key":"state/a"}`,
			`{"author":"ann","footprint":"3kb","key":"state/a","pinned":"v1","spinner":"dots","tokenizer":"cl100k"}`},
		{"values under innocent keys", `{"a":"` + openAIKey + `","b":"` + awsKey + `","c":"` + githubToken + `","d":"` + slackToken + `","e":"` + jwt + `","f":"Bearer abc.def"}`,
			`{"a":"[redacted]","b":"[redacted]","c":"[redacted]","d":"[redacted]","e":"[redacted]","f":"[redacted]"}`},
		{"list of secrets", `["` + anthropicKey + `","plain",1,null]`, `["[redacted]","plain",1,null]`},
		{"top-level string", `"` + anthropicKey + `"`, `"[redacted]"`},
		{"key holding a credential", `{"` + githubToken + `":1,"[redacted]":2}`, `{"[redacted]":2,"[redacted] (2)":1}`},
		{"url password", `{"dsn":"postgres://bob:hunter2@db:5432/app?sslmode=off"}`, `{"dsn":"postgres://bob:[redacted]@db:5432/app?sslmode=off"}`},
		{"scalars", `[1,2.5,-0,1e300,true,false,null,""]`, `[1,2.5,-0,1e300,true,false,null,""]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := encode(t, redact.Value(decode(t, tc.in))); got != tc.want {
				t.Errorf("Value(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestValueStrings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		// Whole values.
		{"Bearer " + jwt, "[redacted]"},
		{"  bearer abc  ", "[redacted]"},
		{"Basic YWxhZGRpbjpvcGVuc2VzYW1l", "[redacted]"},
		{anthropicKey, "[redacted]"},
		{pemKey, "[redacted]"},
		// In place.
		{"curl -H 'Authorization: Bearer abcdef123456' https://x", "curl -H 'Authorization: [redacted]' https://x"},
		{"curl -H \"X-Api-Key: k123\" -d @f https://x", "curl -H \"X-Api-Key: [redacted]\" -d @f https://x"},
		{"Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l\r\nHost: x", "Authorization: [redacted]\r\nHost: x"},
		{"GET / HTTP/1.1\nCookie: a=1; b=2\nHost: x", "GET / HTTP/1.1\nCookie: [redacted]\nHost: x"},
		{"export OPENAI_API_KEY=abc123 && run", "export OPENAI_API_KEY=[redacted] && run"},
		{"PGPASSWORD='pa ss' psql -h db", "PGPASSWORD='[redacted]' psql -h db"},
		{"mysql --password hunter2 -u root", "mysql --password [redacted] -u root"},
		{"mysql --password=hunter2 -u root", "mysql --password=[redacted] -u root"},
		{"https://api.x.com/v1?api_key=abc123&page=2", "https://api.x.com/v1?api_key=[redacted]&page=2"},
		{`{"password":"hun\"ter2","user":"bob"}`, `{"password":"[redacted]","user":"bob"}`},
		{`{\"token\":\"abc\",\"n\":1}`, `{\"token\":\"[redacted]\",\"n\":1}`},
		{"password: hunter2\nuser: bob", "password: [redacted]\nuser: bob"},
		{"key is " + awsKey + ".", "key is [redacted]."},
		{"git clone https://" + githubToken + "@github.com/o/r", "git clone https://[redacted]@github.com/o/r"},
		{"git clone https://x-access-token:tok3n@github.com/o/r.git", "git clone https://x-access-token:[redacted]@github.com/o/r.git"},
		{"postgres://u:pa/ss@host/db", "postgres://u:[redacted]@host/db"},
		{"send " + slackToken + " now", "send [redacted] now"},
		{"jwt=" + jwt, "jwt=[redacted]"},
		{"key:\n" + pemKey + "\ndone", "key:\n[redacted]\ndone"},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk (cut", "[redacted]"},
		{"use bearer " + jwt + " please", "use [redacted] please"},
		// Unchanged.
		{"max_tokens=100 token_count: 5", "max_tokens=100 token_count: 5"},
		{"has_password=true", "has_password=true"},
		{"Bearer authentication is used", "Bearer authentication is used"},
		{"Basic auth is weak", "Basic auth is weak"},
		{"docker run -v /host/secret:/run/secret:ro img", "docker run -v /host/secret:/run/secret:ro img"},
		{"call agent::token_refresh then auth::login", "call agent::token_refresh then auth::login"},
		{"go test ./task-runner-abcdefghijklmnopqrstuvw", "go test ./task-runner-abcdefghijklmnopqrstuvw"},
		{"du -sh disk-usage-report-2024-01-01-final", "du -sh disk-usage-report-2024-01-01-final"},
		{"https://host:8080/x?mail=a@b.com", "https://host:8080/x?mail=a@b.com"},
		{"https://example.com/a/b?q=1#f", "https://example.com/a/b?q=1#f"},
		{"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
		{"if token == expected {", "if token == expected {"},
		{"ls -la /tmp", "ls -la /tmp"},
		{"", ""},
		{"[redacted]", "[redacted]"},
	} {
		if got := redact.Value(tc.in); got != tc.want {
			t.Errorf("Value(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

type creds struct {
	User     string `json:"user"`
	Password string `json:"password"`
	Raw      []byte `json:"raw,omitempty"`
}

type named string

type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("boom") }

type badErr struct{ p *int }

func (e *badErr) Error() string { return string(rune(*e.p)) }

type withChan struct{ C chan int }

func TestValueGoTypes(t *testing.T) {
	t.Parallel()
	cyclic := map[string]any{"a": 1}
	cyclic["self"] = cyclic
	list := []any{1}
	list = append(list, nil)
	list[1] = list
	type selfMap map[string]any
	sm := selfMap{}
	sm["me"] = sm

	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"struct by json name", creds{User: "bob", Password: "x"}, `{"password":"[redacted]","user":"bob"}`},
		{"pointer to struct", &creds{User: "bob", Password: "x"}, `{"password":"[redacted]","user":"bob"}`},
		{"nil pointer", (*creds)(nil), `null`},
		{"typed map", map[string]string{"token": "t", "a": "b"}, `{"a":"b","token":"[redacted]"}`},
		{"map any any", map[any]any{"password": "x", 1: "one", true: awsKey}, `{"1":"one","password":"[redacted]","true":"[redacted]"}`},
		{"raw message", json.RawMessage(`{"token":"x","n":1}`), `{"n":1,"token":"[redacted]"}`},
		{"bad raw message", json.RawMessage(`{"token":`), `"{\"token\":"`},
		{"raw message with a tail", json.RawMessage(`{"n":1}]tail`), `"{\"n\":1}]tail"`},
		{"bytes", []byte("password=x"), `"password=[redacted]"`},
		{"error", errors.New("login with " + anthropicKey + " failed"), `"login with [redacted] failed"`},
		{"panicking error", &badErr{}, `"[unsupported *redact_test.badErr]"`},
		{"panicking marshaler", panicky{}, `"[unsupported redact_test.panicky]"`},
		{"chan field", withChan{C: make(chan int)}, `"[unsupported redact_test.withChan]"`},
		{"named string", named(githubToken), `"[redacted]"`},
		{"ints", []any{int8(-1), uint64(1 << 63), int64(-5), float32(0.5)}, `[-1,9223372036854775808,-5,0.5]`},
		{"complex", complex(1, 2), `"(1+2i)"`},
		{"cyclic map", cyclic, `{"a":1,"self":{"a":1,"self":` + strings.Repeat(`{"a":1,"self":`, 30) + `"[…]"` + strings.Repeat("}", 32)},
		{"named cyclic map", sm, `"[unsupported redact_test.selfMap]"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := encode(t, redact.Value(tc.in)); got != tc.want {
				t.Errorf("Value(%s)\n got %s\nwant %s", tc.name, got, tc.want)
			}
		})
	}

	// Values that only must not panic.
	for _, v := range []any{make(chan int), func() {}, list, struct{ f func() }{}, new(any), [2]byte{1, 2}} {
		_ = redact.Value(v)
		_ = redact.Excerpt(v, 64)
	}
}

func TestValueDoesNotMutate(t *testing.T) {
	t.Parallel()
	in := decode(t, `{"password":"p","a":[{"token":"t","b":{"Authorization":"Bearer x"}},"`+anthropicKey+`"],"`+awsKey+`":1}`)
	before := encode(t, in)
	out := redact.Value(in)
	_ = redact.Excerpt(in, 40)
	if after := encode(t, in); after != before {
		t.Fatalf("input changed:\n%s\n%s", before, after)
	}
	// The copy shares nothing with the input.
	out.(map[string]any)["a"].([]any)[0].(map[string]any)["b"].(map[string]any)["x"] = 1
	if after := encode(t, in); after != before {
		t.Fatalf("copy aliases the input:\n%s\n%s", before, after)
	}
}

func TestValueDepth(t *testing.T) {
	t.Parallel()
	got := encode(t, redact.Value(decode(t, `{"a":{"b":1},"c":[[]],"d":1}`), redact.WithMaxDepth(1)))
	if want := `{"a":"[…]","c":"[…]","d":1}`; got != want {
		t.Errorf("depth 1: got %s, want %s", got, want)
	}
	deep := strings.Repeat("[", 100) + `"` + anthropicKey + `"` + strings.Repeat("]", 100)
	got = encode(t, redact.Value(decode(t, deep)))
	if want := strings.Repeat("[", 32) + `"[…]"` + strings.Repeat("]", 32); got != want {
		t.Errorf("default depth: got %s, want %s", got, want)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]redact.Option{
		"max string 0":   redact.WithMaxString(0),
		"max depth 0":    redact.WithMaxDepth(0),
		"max depth huge": redact.WithMaxDepth(redact.MaxDepthLimit + 1),
		"max items 0":    redact.WithMaxItems(0),
		"empty key":      redact.WithExtraKeys("ok", "-_ ."),
		"nil":            nil,
	} {
		r, err := redact.New(opt)
		if !errors.Is(err, redact.ErrInvalidOption) || r != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalidOption", name, r, err)
		}
	}
	if _, err := redact.New(redact.WithMaxString(1), redact.WithMaxDepth(redact.MaxDepthLimit), redact.WithMaxItems(1), redact.WithExtraKeys("ssn")); err != nil {
		t.Errorf("valid options: %v", err)
	}

	// The package functions ignore a bad option, but keep valid extra keys.
	v := map[string]any{"tenant": "t", "a": map[string]any{"b": 1}}
	got := encode(t, redact.Value(v, redact.WithMaxDepth(0), redact.WithExtraKeys("", "tenant"), nil))
	if want := `{"a":{"b":1},"tenant":"[redacted]"}`; got != want {
		t.Errorf("lenient options: got %s, want %s", got, want)
	}
}

// Value is idempotent: redacting twice changes nothing more.
func TestValueIdempotent(t *testing.T) {
	t.Parallel()
	in := decode(t, `{"a":"curl -H 'Authorization: Bearer abcdef123456' https://u:p@x/`+awsKey+`","password":"x","b":["token=1 pin: 2"]}`)
	once := redact.Value(in)
	if twice := redact.Value(once); !reflect.DeepEqual(once, twice) {
		t.Errorf("not idempotent:\n%s\n%s", encode(t, once), encode(t, twice))
	}
}

// Scanning is linear: adversarial strings of 256 KiB take milliseconds, not
// the minutes a quadratic scan would.
func TestValueLinear(t *testing.T) {
	t.Parallel()
	for _, unit := range []string{
		"eyJ", "a://", "a://b:c", "password=", "password:", "--password ", "password='", "x=", "sk-", "AKIA",
		"ghp_", "xoxb-", "Bearer ", "basic ", "-----BEGIN ", "-----BEGIN PRIVATE KEY-----", "@", ":", "\\\"",
		"password:\n", "password:\n\n", " token:\n  ", "x => ", "k := ", "password: t = '",
		"ya29.", "glpat-", "hf_", "ya29.ab.", "name: token ", "name: 'token", "name: token\n  value:\n",
		"- name: token\n", "\n  value: x", "name:\"", "pw=",
		"value: x name: token ", "- value: x\n", "\n  name: token", "value:\n", "{\"value\":\"x\",\"name\":\"token\"}",
	} {
		s := strings.Repeat(unit, 256<<10/len(unit))
		start := time.Now()
		_ = redact.Value(s)
		_ = redact.Excerpt(s, 512)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%q×%d took %v", unit, len(s)/len(unit), d)
		}
	}
}

// Secrets assigned in code, makefiles and YAML: the operators of other
// languages (=>, :=, ?=, +=), typed declarations and values on the lines
// below their key. Each leaked the secret whole.
func TestValueStringsCodeAndYAML(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`$db = ['password' => 'hunter2xyz'];`, `$db = ['password' => '[redacted]'];`},
		{`{:api_key => "abc123", :user => "bob"}`, `{:api_key => "[redacted]", :user => "bob"}`},
		{`password := "hunter2xyz"`, `password := "[redacted]"`},
		{"TOKEN := abc123\nall: build", "TOKEN := [redacted]\nall: build"},
		{"API_KEY ?= abc123 # default", "API_KEY ?= [redacted] # default"},
		{"SECRET+=abc123", "SECRET+=[redacted]"},
		{`password: str = "hunter2xyz"`, `password: [redacted]`},
		{`const apiKey: string = 'abc123'; call()`, `const apiKey: [redacted]; call()`},
		{"db:\n  password: |\n    hunter2xyz\n  user: bob\n", "db:\n  password: [redacted]\n  user: bob\n"},
		{"password: >-\r\n  hunter2\r\n  xyz\r\nuser: bob", "password: [redacted]\r\nuser: bob"},
		{"password:\n  hunter2xyz\nuser: bob", "password:[redacted]\nuser: bob"},
		{"- token:\n    abc123\n- name: x", "- token:[redacted]\n- name: x"},
		{"credentials:\n  user: bob\n\n  pass: x\nport: 1", "credentials:[redacted]\nport: 1"},
		{"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFy+/==;EndpointSuffix=core.windows.net",
			"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=[redacted];EndpointSuffix=core.windows.net"},
		{"curl -H 'Ocp-Apim-Subscription-Key: 0123abcd' https://x", "curl -H 'Ocp-Apim-Subscription-Key: [redacted]' https://x"},
		// Unchanged: no value below, prose or code before the key, a
		// sibling at the key's own indentation.
		{"- password:\n  user: bob", "- password:\n  user: bob"},
		{"password:\nuser: bob", "password:\nuser: bob"},
		{"class TokenStore:\n    pass", "class TokenStore:\n    pass"},
		{"The token:\n   is missing", "The token:\n   is missing"},
		{"x = token => token.trim()", "x = token => [redacted])"},
		{"if token != want {", "if token != want {"},
	} {
		got := redact.Value(tc.in)
		if got != tc.want {
			t.Errorf("Value(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if again := redact.Value(got); again != got {
			t.Errorf("Value(%q) is not idempotent: %q then %q", tc.in, got, again)
		}
	}
}

// The value of a name/value pair is judged under the name: Kubernetes env
// vars and the header lists of HAR files and HTTP tools leaked the secret
// under the innocent key "value".
func TestValueNameValuePairs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"env":[{"name":"DB_PASSWORD","value":"hunter2xyz"},{"name":"PORT","value":"5432"}]}`,
			`{"env":[{"name":"DB_PASSWORD","value":"[redacted]"},{"name":"PORT","value":"5432"}]}`},
		{`{"headers":[{"name":"X-Api-Key","value":"abc123"},{"name":"Accept","value":"*/*"}]}`,
			`{"headers":[{"name":"X-Api-Key","value":"[redacted]"},{"name":"Accept","value":"*/*"}]}`},
		{`[{"key":"client_secret","Value":"abc123","enabled":true}]`, `[{"Value":"[redacted]","enabled":true,"key":"client_secret"}]`},
		{`{"header":"Authorization","value":{"scheme":"x","v":"abc123"}}`, `{"header":"Authorization","value":"[redacted]"}`},
		// The count rule of the name applies; other names, or no value, stay.
		{`{"name":"max_tokens","value":1024}`, `{"name":"max_tokens","value":1024}`},
		{`{"name":"pin","value":1234}`, `{"name":"pin","value":"[redacted]"}`},
		{`{"name":"path","value":"/x","token_hint":"none"}`, `{"name":"path","token_hint":"[redacted]","value":"/x"}`},
		{`{"name":"password","label":"x"}`, `{"label":"x","name":"password"}`},
	} {
		in := decode(t, tc.in)
		if got := encode(t, redact.Value(in)); got != tc.want {
			t.Errorf("Value(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
		if got := redact.Excerpt(in, 4096); got != tc.want {
			t.Errorf("Excerpt(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// A Kubernetes secretKeyRef is redacted whole although it only refers to a
// secret (the chosen side: its key contains "secret", and the key rule
// does not tell references from values); a configMapKeyRef stays, its
// "key": "password" included.
func TestValueSecretReferences(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"name":"DB_PASSWORD","valueFrom":{"secretKeyRef":{"name":"db","key":"password"}}}`,
			`{"name":"DB_PASSWORD","valueFrom":{"secretKeyRef":"[redacted]"}}`},
		{`{"name":"DB_PASSWORD","valueFrom":{"configMapKeyRef":{"name":"db","key":"password"}}}`,
			`{"name":"DB_PASSWORD","valueFrom":{"configMapKeyRef":{"key":"password","name":"db"}}}`},
		{`"- name: DB_PASSWORD\n  valueFrom:\n    secretKeyRef:\n      name: db\n      key: password\n"`,
			`"- name: DB_PASSWORD\n  valueFrom:\n    secretKeyRef:[redacted]\n"`},
		{`"- name: DB_PASSWORD\n  valueFrom:\n    configMapKeyRef:\n      name: db\n      key: password\n"`,
			`"- name: DB_PASSWORD\n  valueFrom:\n    configMapKeyRef:\n      name: db\n      key: password\n"`},
	} {
		in := decode(t, tc.in)
		if got := encode(t, redact.Value(in)); got != tc.want {
			t.Errorf("Value(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
		if got := redact.Excerpt(in, 4096); got != tc.want {
			t.Errorf("Excerpt(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// The pw and pwd abbreviations name a password (db_pw=x leaked); PWD and
// OLDPWD, spelled as the shell spells them, hold a directory and stay.
func TestValuePasswordAbbreviations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"db_pw":"hunter2xyz","PW":"x","pwd":"y","passwd":"z","MYSQL_PWD":"w","PWD":"/home/ann","OLDPWD":"/tmp"}`,
			`{"MYSQL_PWD":"[redacted]","OLDPWD":"/tmp","PW":"[redacted]","PWD":"/home/ann","db_pw":"[redacted]","passwd":"[redacted]","pwd":"[redacted]"}`},
		{`"DB_PW=hunter2xyz PWD=/src make"`, `"DB_PW=[redacted] PWD=/src make"`},
		{`"mysql --pw hunter2xyz -u root; cd $PWD"`, `"mysql --pw [redacted] -u root; cd $PWD"`},
		{`"redis:\n  pw: hunter2xyz\n  port: 6379"`, `"redis:\n  pw: [redacted]\n  port: 6379"`},
		{`"OLDPWD=/a PWD=/b passwd=hunter2xyz"`, `"OLDPWD=/a PWD=/b passwd=[redacted]"`},
	} {
		if got := encode(t, redact.Value(decode(t, tc.in))); got != tc.want {
			t.Errorf("Value(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// The value of a name/value pair written as text — Kubernetes env vars in
// YAML, a JSON pair inside a command — is judged under the pair's name, as
// the decoded form is: "- name: DB_PASSWORD⏎  value: x" leaked x.
func TestValueStringsNameValuePairs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"env:\n- name: DB_PASSWORD\n  value: hunter2xyz\n- name: PORT\n  value: \"5432\"\n",
			"env:\n- name: DB_PASSWORD\n  value: [redacted]\n- name: PORT\n  value: \"5432\"\n"},
		{"  env:\n    - name: \"API_TOKEN\"\n      value: 'abc123'\n    - name: HOME\n      value: /home/ann",
			"  env:\n    - name: \"API_TOKEN\"\n      value: '[redacted]'\n    - name: HOME\n      value: /home/ann"},
		{"- key: client_secret\r\n  enabled: true\r\n\r\n  value: abc123\r\n", "- key: client_secret\r\n  enabled: true\r\n\r\n  value: [redacted]\r\n"},
		{"- name: DB_PASSWORD\n  value: |\n    hunter2\n    xyz\n- name: X\n  value: y", "- name: DB_PASSWORD\n  value: [redacted]\n- name: X\n  value: y"},
		{"headers:\n  - header: Authorization\n    value: Token abc123", "headers:\n  - header: Authorization\n    value: [redacted]"},
		{`kubectl patch -p '{"name":"DB_PASSWORD","value":"abc123"}'`, `kubectl patch -p '{"name":"DB_PASSWORD","value":"[redacted]"}'`},
		{"{\n  \"name\": \"X-Api-Key\",\n  \"value\": \"abc123\"\n}", "{\n  \"name\": \"X-Api-Key\",\n  \"value\": \"[redacted]\"\n}"},
		{"{name: X-Api-Key, value: abc123}", "{name: X-Api-Key, value: [redacted]}"},
		// The value written before its name.
		{"env:\n- value: hunter2xyz\n  name: DB_PASSWORD\n- value: \"5432\"\n  name: PORT\n",
			"env:\n- value: [redacted]\n  name: DB_PASSWORD\n- value: \"5432\"\n  name: PORT\n"},
		{"- value: |\n    hunter2\n    xyz\n  enabled: true\n\n  key: client_secret", "- value: [redacted]\n  enabled: true\n\n  key: client_secret"},
		{"{value: abc123, name: X-Api-Key}", "{value: [redacted], name: X-Api-Key}"},
		{`curl -d '{"value":"abc123","name":"X-Api-Key"}'`, `curl -d '{"value":"[redacted]","name":"X-Api-Key"}'`},
		{`{\"value\":\"abc123\",\"header\":\"Authorization\"}`, `{\"value\":\"[redacted]\",\"header\":\"Authorization\"}`},
		{"- value: 1024\n  name: max_tokens\n- value: 1234\n  name: pin", "- value: 1024\n  name: max_tokens\n- value: [redacted]\n  name: pin"},
		// The count rule of the name applies.
		{"- name: max_tokens\n  value: 1024", "- name: max_tokens\n  value: 1024"},
		{"- name: pin\n  value: 1234", "- name: pin\n  value: [redacted]"},
		// Unchanged: an innocent name, another item, another mapping,
		// not first on its line, valueFrom.
		{"- name: PORT\n  value: 5432", "- name: PORT\n  value: 5432"},
		{"- name: DB_PASSWORD\n  valueFrom: {configMapKeyRef: {name: db}}\n- name: HOST\n  value: db.local",
			"- name: DB_PASSWORD\n  valueFrom: {configMapKeyRef: {name: db}}\n- name: HOST\n  value: db.local"},
		{"- name: DB_PASSWORD\n- value: db.local", "- name: DB_PASSWORD\n- value: db.local"},
		{"- name: DB_PASSWORD\nvalue: db.local", "- name: DB_PASSWORD\nvalue: db.local"},
		{"a:\n  name: token\nb:\n  value: db.local", "a:\n  name: token\nb:\n  value: db.local"},
		{"- name: DB_PASSWORD\n  x: {value: db.local}", "- name: DB_PASSWORD\n  x: {value: db.local}"},
		{"- name: token\n    value: deeper", "- name: token\n    value: deeper"},
		{"- value: db.local\n- name: DB_PASSWORD", "- value: db.local\n- name: DB_PASSWORD"},
		{"- value: db.local\nname: DB_PASSWORD", "- value: db.local\nname: DB_PASSWORD"},
		{"a:\n  value: db.local\nb:\n  name: token", "a:\n  value: db.local\nb:\n  name: token"},
		{"- x: {value: db.local}\n  name: DB_PASSWORD", "- x: {value: db.local}\n  name: DB_PASSWORD"},
		{"- value: deeper\n    name: token", "- value: deeper\n    name: token"},
		{"set value: db.local\n    name: token", "set value: db.local\n    name: token"},
	} {
		got := redact.Value(tc.in)
		if got != tc.want {
			t.Errorf("Value(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if again := redact.Value(got); again != got {
			t.Errorf("Value(%q) is not idempotent: %q then %q", tc.in, got, again)
		}
		if ex, want := redact.Excerpt(tc.in, 4096), encode(t, tc.want); ex != want {
			t.Errorf("Excerpt(%q)\n got %s\nwant %s", tc.in, ex, want)
		}
	}
}
