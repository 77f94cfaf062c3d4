package scripted

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// EchoModel is the model every scripted provider serves: [Echo].
const EchoModel = "echo"

// MaxSleep bounds the total /sleep of one echo prompt.
const MaxSleep = 60 * time.Second

// The echo commands: a line of the prompt whose first word is one of them.
const (
	cmdCall  = "/call"
	cmdFail  = "/fail"
	cmdSleep = "/sleep"
	cmdThink = "/think"
)

// errCommand wraps every malformed echo command.
var errCommand = errors.New("malformed command")

// Echo is the script of the "echo" model: a model any client can drive
// with plain text.
//
// When the transcript ends with function results (the messages after the
// last assistant message are function_result messages), Echo answers with
// one line per result, "function <id> returned: <text>" ("returned an
// error" when is_error), and stops with "end": it never repeats the calls.
//
// Otherwise it reads the text of the latest user message line by line:
//
//	/call FUNCTION_ID {json args}   a function call (args default to {});
//	                                several lines make parallel calls, in order
//	/fail KIND [message]            fail with an error event of KIND
//	                                (auth_expired, rate_limited,
//	                                context_overflow, transient, permanent)
//	/sleep MS                       wait MS milliseconds before the first
//	                                token (at most MaxSleep in all)
//	/think TEXT                     a line of a thinking block
//
// and echoes every other line back as the answer. A prompt with only text
// is echoed exactly (CRLF line ends included); around commands, leading
// and trailing blank lines are dropped and lines end in "\n". A malformed
// command (an unknown kind, arguments that are not a JSON object) is
// answered with a permanent failure that says which line is wrong.
func Echo(req StreamRequest) (Reply, error) {
	msgs := req.Messages
	n := len(msgs)
	if n > 0 && msgs[n-1].Role == agent.RoleFunctionResult {
		i := n - 1
		for i > 0 && msgs[i-1].Role == agent.RoleFunctionResult {
			i--
		}
		return Reply{Text: quoteResults(msgs[i:])}, nil
	}
	for i := n - 1; i >= 0; i-- {
		if msgs[i].Role != agent.RoleUser {
			continue
		}
		r, err := parsePrompt(textOf(msgs[i].Content))
		if err != nil {
			return Reply{Fail: agent.ErrorPermanent, FailMessage: "echo: " + err.Error()}, nil
		}
		return r, nil
	}
	return Reply{}, nil
}

// parsePrompt reads an echo prompt into a reply.
func parsePrompt(text string) (Reply, error) {
	var (
		r        Reply
		lines    []string
		thinking []string
		commands bool
	)
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		word, rest := splitWord(strings.TrimSpace(line))
		switch word {
		case cmdCall:
			c, err := parseCall(rest)
			if err != nil {
				return Reply{}, fmt.Errorf("line %d: %w", n+1, err)
			}
			r.Calls = append(r.Calls, c)
		case cmdFail:
			kind, msg := splitWord(rest)
			if !agent.ErrorKind(kind).Valid() {
				return Reply{}, fmt.Errorf("line %d: %w: %s: unknown kind %q (want auth_expired, rate_limited, context_overflow, transient or permanent)", n+1, errCommand, cmdFail, kind)
			}
			if r.Fail != "" {
				return Reply{}, fmt.Errorf("line %d: %w: a second %s", n+1, errCommand, cmdFail)
			}
			r.Fail, r.FailMessage = agent.ErrorKind(kind), msg
		case cmdSleep:
			ms, err := strconv.ParseInt(rest, 10, 64)
			if err != nil || ms < 0 || ms > MaxSleep.Milliseconds() {
				return Reply{}, fmt.Errorf("line %d: %w: %s wants milliseconds from 0 to %d, not %q", n+1, errCommand, cmdSleep, MaxSleep.Milliseconds(), rest)
			}
			r.Delay += time.Duration(ms) * time.Millisecond
			if r.Delay > MaxSleep {
				return Reply{}, fmt.Errorf("line %d: %w: more than %v of %s in all", n+1, errCommand, MaxSleep, cmdSleep)
			}
		case cmdThink:
			thinking = append(thinking, rest)
		default:
			lines = append(lines, line)
			continue
		}
		commands = true
	}
	if !commands {
		// Echoed exactly: the lines above lost their "\r".
		r.Text = text
		return r, nil
	}
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	r.Text = strings.Join(lines, "\n")
	r.Thinking = strings.Join(thinking, "\n")
	return r, nil
}

// parseCall reads the rest of a /call line: a function id and optional
// JSON object arguments.
func parseCall(rest string) (Call, error) {
	fid, args := splitWord(rest)
	if fid == "" {
		return Call{}, fmt.Errorf("%w: %s needs a function id", errCommand, cmdCall)
	}
	if err := subjects.ValidateFunctionID(fid); err != nil {
		return Call{}, fmt.Errorf("%w: %s: %w", errCommand, cmdCall, err)
	}
	c := Call{FunctionID: fid, Arguments: map[string]any{}}
	if args == "" {
		return c, nil
	}
	var v any
	if err := agent.UnmarshalJSONExact([]byte(args), &v); err != nil {
		return Call{}, fmt.Errorf("%w: %s %s: arguments are not JSON: %v", errCommand, cmdCall, fid, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return Call{}, fmt.Errorf("%w: %s %s: arguments are not a JSON object", errCommand, cmdCall, fid)
	}
	c.Arguments = obj
	return c, nil
}

// splitWord splits a trimmed line at its first whitespace.
func splitWord(s string) (word, rest string) {
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// textOf joins the text blocks of content with newlines.
func textOf(content []agent.Content) string {
	var parts []string
	for _, c := range content {
		if c.Type == agent.ContentText {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// quoteResults is the echo answer to a batch of function results.
func quoteResults(results []agent.Message) string {
	var b strings.Builder
	for i, m := range results {
		if i > 0 {
			b.WriteByte('\n')
		}
		verb := "returned"
		if m.IsError {
			verb = "returned an error"
		}
		fmt.Fprintf(&b, "function %s %s: ", m.FunctionID, verb)
		for j, c := range m.Content {
			if j > 0 {
				b.WriteByte('\n')
			}
			switch c.Type {
			case agent.ContentImage:
				fmt.Fprintf(&b, "[image %s]", c.Mime)
			default:
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}
