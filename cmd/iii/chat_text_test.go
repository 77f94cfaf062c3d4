package main

import (
	"encoding/json"
	"maps"
	"os/exec"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// redactURL hides every password and token of a --nats value, whatever
// its shape (a list, no scheme, characters url.Parse refuses), and
// leaves the rest readable.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:s3cret@host:4222", "nats://user:xxxxx@host:4222"},
		{"nats://s3cret@host:4222", "nats://xxxxx@host:4222"},
		{"tls://user:s3cret@host", "tls://user:xxxxx@host"},
		{"user:s3cret@host:4222", "user:xxxxx@host:4222"},
		{"s3cret@host", "xxxxx@host"},
		{"nats://user:@host", "nats://user:xxxxx@host"},
		{"nats://user:s3c@ret@host", "nats://user:xxxxx@host"},
		{"nats://user:s3c/ret@host", "nats://user:xxxxx@host"},
		{"nats://user:s3c%zzret@host", "nats://user:xxxxx@host"},
		{"nats://user:s3c ret@host", "nats://user:xxxxx@host"},
		{"nats://user:s3c,ret@host", "nats://user:xxxxx@host"},
		{"nats://user:s3c:ret@host", "nats://user:xxxxx@host"},
		{"nats://a:s3cret@h1,nats://s3cret@h2, nats://h3", "nats://a:xxxxx@h1,nats://xxxxx@h2, nats://h3"},
		{"nats://a:s3cret@h1,b:s3cret@h2", "nats://a:xxxxx@h1,b:xxxxx@h2"},
		{"nats://h1,b:s3cret@h2", "nats://h1,b:xxxxx@h2"},
		{"u:a://s3cret@h", "u:xxxxx@h"},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got := redactURL(tc.in)
			if got != tc.want {
				t.Fatalf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if strings.Contains(got, "s3c") || strings.Contains(got, "ret@") {
				t.Fatalf("redactURL(%q) = %q shows the secret", tc.in, got)
			}
		})
	}
}

// A chat that cannot connect says where it tried without the password or
// token of --nats: nats.go's own error quotes a URL that does not parse,
// and may hold part of the password in its reason.
func TestChatConnectErrorHidesCredentials(t *testing.T) {
	t.Parallel()
	commands := map[string][]string{
		"chat":      {"chat", "--embedded=false", "-m", "hi", "--nats"},
		"trigger":   {"trigger", "state::get", `{"scope":"s","key":"k"}`, "--nats"},
		"functions": {"functions", "--nats"},
		"worker":    {"worker", "run", "provider-scripted", "--home", t.TempDir(), "--nats"},
		"up --join": {"up", "--home", t.TempDir(), "--http", "", "--join"},
	}
	for _, url := range []string{
		"nats://user:s3cret@127.0.0.1:1",
		"nats://s3cret@127.0.0.1:1",
		"nats://user:s3/cret@127.0.0.1:1",
		"nats://user:s3cret%zz@127.0.0.1:1",
		"nats://user:s3c,ret@127.0.0.1:1",
		"user:s3cret@127.0.0.1:1",
	} {
		for name, args := range commands {
			t.Run(name+" "+url, func(t *testing.T) {
				t.Parallel()
				out, err := runIII(t, append(args, url)...)
				if err == nil {
					t.Fatalf("%s connected to %s:\n%s", name, url, out)
				}
				line := err.Error()
				for _, secret := range []string{"s3", "cret", "ret"} {
					if strings.Contains(line, secret) || strings.Contains(out, secret) {
						t.Fatalf("the error shows the password (%q):\n%s\n%s", secret, line, out)
					}
				}
				if !strings.Contains(line, "connect to ") || !strings.Contains(line, "127.0.0.1:1") {
					t.Fatalf("the error does not say where it tried: %s", line)
				}
			})
		}
	}
}

// shellQuote gives back its input through sh: printf %s of the quoted
// word prints the word itself, whatever shell-special characters it holds.
func FuzzShellQuote(f *testing.F) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		f.Fatalf("a POSIX sh is needed: %v", err)
	}
	for _, s := range []string{"", "plain", "it's", "'", "''", `'\''`, `"$HOME" $(id) ` + "`id`", `\n\\`, "a\nb", "*?[x]~#;&|<>", "-n", "%s %%", "ünï'cödé"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			return // no argument of a process holds a NUL
		}
		got, err := exec.Command(sh, "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil {
			t.Fatalf("sh -c printf %%s %s: %v", shellQuote(s), err)
		}
		if string(got) != s {
			t.Fatalf("sh gives back %q for %q (quoted %s)", got, s, shellQuote(s))
		}
	})
}

// The commands chat prints hold ids a model chose (a function call id may
// hold a quote or a $): run through sh, each gives the JSON of the
// request it stands for.
func TestChatCommandsQuoteIDs(t *testing.T) {
	t.Parallel()
	req := map[string]string{"session_id": "s1", "function_call_id": `call_'x' "$(id)" <&> \`, "decision": "allow"}
	said := decisionFailed(wire.Errorf(wire.CodeTimeout, "no answer"), req)
	want := map[string]map[string]string{
		"approval::list_pending": {"session_id": "s1"},
		"approval::resolve":      req,
	}
	for _, l := range strings.Split(said, "\n") {
		l, ok := strings.CutPrefix(l, "  iii trigger ")
		if !ok {
			continue
		}
		fn, arg, _ := strings.Cut(l, " ")
		out, err := exec.Command("sh", "-c", "printf %s "+arg).Output()
		if err != nil {
			t.Fatalf("sh: %v: %s", err, l)
		}
		var got map[string]string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: sh gives %q: %v", fn, out, err)
		}
		if w, ok := want[fn]; !ok || !maps.Equal(got, w) {
			t.Fatalf("%s: sh gives %v, want %v", fn, got, w)
		}
		delete(want, fn)
	}
	if len(want) > 0 {
		t.Fatalf("commands missing: %v\n%s", want, said)
	}
}

// A line longer than line mode reads ends chat with an error that says
// so, where it said "bufio.Scanner: token too long"; the lines before it
// come first.
func TestChatLineTooLong(t *testing.T) {
	t.Parallel()
	lr := readLines(strings.NewReader("first\n" + strings.Repeat("x", maxLine+1) + "\nlast\n"))
	defer lr.stop()
	if l, ok, err := lr.next(t.Context(), func() {}); !ok || l != "first" {
		t.Fatalf("first line %q, %v, %v", l, ok, err)
	}
	_, ok, err := lr.next(t.Context(), func() {})
	if ok || err == nil || !strings.Contains(err.Error(), "longer than 1024 KiB") {
		t.Fatalf("an over-long line: ok %v, %v", ok, err)
	}
}
