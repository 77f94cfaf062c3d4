package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/spf13/cobra"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

type chatConfig struct {
	session  string
	provider string
	model    string
	message  string
	embedded bool
	sandbox  bool
	home     string
	// reconnectWait bounds how long a turn waits for a node it lost.
	reconnectWait time.Duration
	// quiet is how long a turn with no call waiting for a human may go
	// without an event before chat gives up on it.
	quiet time.Duration
	// notes gets what is said about the connection (stderr); url is the
	// node's address as the user gave it, credentials hidden (redactURL).
	notes io.Writer
	url   string
}

// errNodeLost is the cause of a turn that chat stopped following because
// the connection to the node was lost and did not come back in time.
var errNodeLost = errors.New("lost the connection to the node")

func newChatCmd(g *globals) *cobra.Command {
	cfg := chatConfig{quiet: 5 * time.Minute}
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Chat with an agent in plain line mode",
		Long: "Sends each line you type as a user message, streams the answer's tokens and the function calls as they\n" +
			"happen, and waits for the turn to end. With no node reachable at --nats (the default address), it starts\n" +
			"one in this process (a server there that refuses chat's credentials is an error, not a reason to). The\n" +
			"default model is the offline scripted \"echo\": it echoes text, and a line `/call FUNCTION_ID {json}`\n" +
			"makes it call that function.\n\n" +
			"A turn is durable: when the connection to the node is lost mid-turn (the node stopped, crashed or\n" +
			"restarts), chat says so on stderr and waits up to --reconnect-wait for it to come back, then prints the\n" +
			"rest of the turn, which the node finishes from its last record. A node that does not come back in time\n" +
			"ends chat (in line mode too) with one line on stderr saying so, and exit status 1; the turn resumes\n" +
			"whenever a node of the bus runs again. The same holds while chat asks about a call that needs approval,\n" +
			"and for a line typed while the node is away: it is sent when the node is back. A question about a call\n" +
			"that someone else decided is dropped. At the prompt, chat says on stderr when the node goes away and\n" +
			"when it is back. Credentials in --nats are never printed.\n\n" +
			"What a turn prints comes from a model or a tool (a web page it fetched), so no control character of it\n" +
			"reaches the terminal: terminal escapes (clipboard writes, links, titles, cursor moves), a bare CR, DEL,\n" +
			"C1 controls and bidi overrides show as escapes such as \\x1b, \\r and \\u202e; newlines and tabs stay.\n" +
			"The session's events keep the exact text.",
		Example: `  iii chat
  iii chat -m "/call state::get {\"scope\":\"demo\",\"key\":\"greeting\"}"
  iii chat --provider openai --model gpt-4o`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx := cmd.Context()
			if cfg.reconnectWait < 0 {
				return wire.Errorf(wire.CodeInvalidPayload, "--reconnect-wait %v: want 0 or more", cfg.reconnectWait)
			}
			// An empty -m (a script's unset variable) is not line mode,
			// which would read stdin or send nothing and exit 0.
			if cmd.Flags().Changed("message") && strings.TrimSpace(cfg.message) == "" {
				return wire.Errorf(wire.CodeInvalidPayload, "-m: the message is empty")
			}
			if cfg.session == "" {
				cfg.session = "chat_" + nuid.Next()
			}
			// Refuse a --session, --provider or --model that every run
			// would refuse before connecting, rather than failing each
			// line of line mode and exiting 0.
			if err := newRunStart(cfg, "-").Validate(); err != nil {
				return wire.Wrap(wire.CodeInvalidPayload, err, "")
			}
			// What a turn prints comes from models and tools: it reaches
			// the terminal through safeText, and so does the error that
			// ends chat (it may quote a node's answer).
			defer func() {
				if err != nil {
					err = safeError{err}
				}
			}()
			cfg.notes, cfg.url = terminal(cmd.ErrOrStderr()), redactURL(g.natsURL)
			e, done, err := g.connectFollowing()
			if err != nil {
				if !cfg.embedded || !noNodeAnswers(err) {
					return err
				}
				a, serr := startApp(ctx, upConfig{home: cfg.home, listen: "127.0.0.1:0", logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if serr != nil {
					return fmt.Errorf("no node at %s and none could start here: %w", cfg.url, serr)
				}
				defer func() {
					sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					defer cancel()
					_ = a.close(sctx)
				}()
				fmt.Fprintf(cfg.notes, "(started a node in this process: %s, data in %s)\n", a.node.ClientURL(), cfg.home)
				e, cfg.url = a.e, a.node.ClientURL()
				done = func() {}
			}
			defer done()
			out := terminal(cmd.OutOrStdout())
			if cfg.message != "" {
				stop, err := chatTurn(ctx, e, cfg, cfg.message, out, nil)
				if err == nil && stop != agent.StopEnd {
					// A script must see the failure, not only a [reason] line.
					err = fmt.Errorf("session %s: the run ended with stop_reason %q", cfg.session, stop)
				}
				return err
			}
			fmt.Fprintf(out, "session %s · %s/%s · Ctrl-D to quit\n", cfg.session, cfg.provider, cfg.model)
			// Lines come from a goroutine so that Ctrl-C ends a prompt that
			// waits for input (a read of the terminal does not see ctx).
			lines := readLines(cmd.InOrStdin())
			defer lines.stop()
			idle := &idleWatch{nc: e.Conn(), out: out, notes: cfg.notes, wait: cfg.reconnectWait}
			for {
				fmt.Fprint(out, "> ")
				line, ok, err := lines.next(ctx, idle.check)
				if !ok {
					fmt.Fprintln(out)
					return err
				}
				line = strings.TrimSpace(line)
				if line == "" {
					continue
				}
				idle.down = false // the turn says what becomes of the connection
				if _, err := chatTurn(ctx, e, cfg, line, out, lines); err != nil {
					if ctx.Err() != nil {
						// Ctrl-C mid-turn ends chat, not the run: say
						// so, and which call stays parked.
						fmt.Fprintf(cfg.notes, "\n(%v)\n", err)
						return nil
					}
					if errors.Is(err, errNodeLost) {
						return err // no later line can be sent either
					}
					fmt.Fprintln(out, "error:", err)
				}
			}
		},
	}
	cmd.Flags().StringVar(&cfg.session, "session", "", "session id (default: a new one)")
	cmd.Flags().StringVar(&cfg.provider, "provider", "scripted", "model provider")
	cmd.Flags().StringVar(&cfg.model, "model", "echo", "model id")
	cmd.Flags().StringVarP(&cfg.message, "message", "m", "", "send this one message, print the turn, and exit (status 1 when the run does not end normally or the node is lost)")
	cmd.Flags().DurationVar(&cfg.reconnectWait, "reconnect-wait", time.Minute, "how long a turn, or a line typed while the node is away, waits for the node to come back before chat gives up (0: not at all)")
	cmd.Flags().BoolVar(&cfg.embedded, "embedded", true, "start a node in this process when none answers at --nats")
	cmd.Flags().BoolVar(&cfg.sandbox, "sandbox", false, "give every run a bubblewrap sandbox (fs::* and shell::exec work in it; it is destroyed when the run ends)")
	cmd.Flags().StringVar(&cfg.home, "home", defaultHome(), "data directory of an embedded node")
	return cmd
}

// noNodeAnswers reports whether err, chat's failed connection to --nats,
// says that no server answered there (nothing listens, the host is
// unreachable or unknown): only then does chat start a node of its own.
// A server that answered and refused (credentials, TLS), a --nats that
// does not parse or a --timeout the engine refuses is said instead: a
// node started in their place took the user's lines to a store nobody
// else reaches, and the error was never seen.
func noNodeAnswers(err error) bool {
	if errors.Is(err, nats.ErrNoServers) {
		return true // connection refused
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial" // a timeout, no route, a name that does not resolve
}

// maxLine bounds a line of line mode's input (a node's largest message
// is 1 MiB unless raised).
const maxLine = 1 << 20

// lineReader reads lines on a goroutine of its own, so that a caller
// waiting for one can give up when its context ends.
type lineReader struct {
	lines chan string
	done  chan struct{}
	err   error // read after lines closed
}

func readLines(r io.Reader) *lineReader {
	lr := &lineReader{lines: make(chan string), done: make(chan struct{})}
	go func() {
		defer close(lr.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxLine)
		for sc.Scan() {
			select {
			case lr.lines <- sc.Text():
			case <-lr.done:
				return
			}
		}
		lr.err = sc.Err()
		if errors.Is(lr.err, bufio.ErrTooLong) {
			lr.err = fmt.Errorf("a line of the input is longer than %d KiB, more than a message may hold; it was not sent, nor were the lines after it", maxLine>>10)
		}
	}()
	return lr
}

// next returns the next line; ok is false at the end of the input (err
// says why, nil at EOF) or once ctx ended. While it waits, it calls
// watch once per linkCheck.
func (lr *lineReader) next(ctx context.Context, watch func()) (line string, ok bool, err error) {
	tick := time.NewTicker(linkCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", false, nil
		case l, ok := <-lr.lines:
			if !ok {
				return "", false, lr.err
			}
			return l, true, nil
		case <-tick.C:
			watch()
		}
	}
}

// idleWatch watches the connection while line mode waits at its prompt,
// where no turn does: it says on notes when the node is lost and when it
// is back, each time in a line of its own followed by the prompt again,
// so the user knows before typing a line whether it will wait.
type idleWatch struct {
	nc         *nats.Conn
	out, notes io.Writer
	wait       time.Duration // --reconnect-wait, which a line typed now gets
	down       bool          // the loss was said and the return was not
}

func (w *idleWatch) check() {
	switch up := w.nc.IsConnected(); {
	case !up && !w.down:
		w.down = true
		fmt.Fprintln(w.out) // end the prompt's line
		if w.wait > 0 {
			fmt.Fprintf(w.notes, "(lost the connection to the node; a line typed now waits up to %v for it to come back)\n", w.wait)
		} else {
			fmt.Fprintln(w.notes, "(lost the connection to the node; a line typed before it comes back is not sent: --reconnect-wait is 0)")
		}
	case up && w.down:
		w.down = false
		fmt.Fprintln(w.out)
		fmt.Fprintf(w.notes, "(reconnected to %s)\n", redactURL(w.nc.ConnectedUrl()))
	default:
		return
	}
	fmt.Fprint(w.out, "> ")
}

// stop lets the reading goroutine end at its next line; a read that
// blocks goes on until the input has one or ends.
func (lr *lineReader) stop() { close(lr.done) }

// chatTurn starts a run with text and prints its events until agent_end,
// and returns the run's stop reason. A call that needs approval is put to
// the user as a question that the next line of lines answers when lines
// is set (line mode); otherwise the command that decides it is printed
// and the turn waits. The connection is watched all along, while a
// question waits for its answer too: a lost node is said at once, and
// ends the turn when it does not come back within cfg.reconnectWait.
// whenServed calls trigger (a run's start) until it is answered, within
// wait:
//   - again while it answers function_not_found: the bus had an
//     orchestrator (its event stream exists), so none serving
//     harness::trigger is a node still starting (restarted after a crash,
//     or chat reconnected before its workers registered); nothing ran. A
//     wait of more than a second is said once on notes.
//   - again, once await says the connection is up, when it went
//     unanswered (the connection dropped, the node died): the request or
//     its answer was lost, and the run carries an idempotency key, so the
//     same start sent again starts the run at most once and answers as the
//     first would have. A nil await does not retry these.
func whenServed(ctx context.Context, wait time.Duration, notes io.Writer, await func(context.Context) (string, error), trigger func() error) error {
	deadline, said := time.Now().Add(wait), false
	for start := time.Now(); ; {
		err := trigger()
		switch {
		case err == nil || time.Now().After(deadline):
			return err
		case errors.Is(err, wire.ErrFunctionNotFound):
			if !said && time.Since(start) > time.Second {
				fmt.Fprintf(notes, "(no orchestrator serves harness::trigger yet: the node is starting? waiting up to %v)\n", wait.Round(time.Second))
				said = true
			}
		case await != nil && unanswered(err):
			why, werr := await(ctx)
			if werr != nil {
				return werr
			}
			if why != "" {
				return fmt.Errorf("%w (%s)", err, why)
			}
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unanswered reports whether a call's request or answer may have been
// lost on the way: it timed out, or the connection dropped under it.
func unanswered(err error) bool {
	return errors.Is(err, wire.ErrTimeout) || engine.Unanswered(err) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected)
}

func chatTurn(ctx context.Context, e *engine.Engine, cfg chatConfig, text string, out io.Writer, lines *lineReader) (agent.StopReason, error) {
	subj, err := subjects.EventSubject(cfg.session)
	if err != nil {
		return "", err
	}
	sid := cfg.session
	out, cfg.notes = terminal(out), terminal(cfg.notes)
	nc := e.Conn()
	link := &link{nc: nc, wait: cfg.reconnectWait, notes: cfg.notes}
	// A line sent while the node is away waits for it as a turn does,
	// rather than failing on the first request's timeout.
	if why, err := link.await(ctx); err != nil {
		return "", fmt.Errorf("interrupted; the message was not sent: %w", err)
	} else if why != "" {
		return "", fmt.Errorf("session %s: %w at %s (%s); the message was not sent", sid, errNodeLost, cfg.url, why)
	}
	// Read from just after the stream's current end: an ordered consumer is
	// created lazily, so DeliverNew could start after the first events.
	events := subjects.SessionStream(subjects.EventStream, sid)
	stream, err := e.JetStream().Stream(ctx, events)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if r := subjects.SessionRegion(sid); r != "" {
			return "", fmt.Errorf("session %q is homed in region %q, which has no event stream (%s): is an `iii up --region %s` node running?", sid, r, events, r)
		}
		return "", fmt.Errorf("no orchestrator has run on this bus yet (stream %s missing): is `iii up` running?", events)
	}
	if err != nil {
		return "", err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return "", err
	}
	// The consumer goes when this turn's output is done (or 30 s after a
	// client that died stopped pulling), not after nats.go's default 5
	// minutes: every client that follows events holds one, and the stream
	// limits how many (orchestrator.event_max_consumers).
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subj}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: info.State.LastSeq + 1,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return "", err
	}
	defer func() {
		if ci := cons.CachedInfo(); ci != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = stream.DeleteConsumer(dctx, ci.Name)
		}
	}()
	// Consume, not Next: an ordered consumer makes a new server consumer
	// for every Next and deletes the old one in a goroutine of its own, so
	// each event cost two JetStream API calls and the one deleted last
	// could outlive this process (until its inactive threshold).
	msgs, stopped := make(chan jetstream.Msg, 64), make(chan struct{})
	// The ordered consumer recovers by itself from every error but a
	// closed connection, after which it stops: cc.Closed says so.
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-stopped:
		}
	})
	if err != nil {
		return "", err
	}
	defer func() {
		close(stopped)
		cc.Stop()
	}()
	consumeEnded := cc.Closed()
	lost := func(why string) error {
		return fmt.Errorf("session %s: %w at %s (%s); the turn did not finish here, and resumes when a node runs again (see it with: iii trigger turn::get_state %s)",
			sid, errNodeLost, cfg.url, why, shellJSON(map[string]string{"session_id": sid}))
	}
	var res orchestrator.RunStartResult
	// One idempotency key a line: a start sent again after a lost answer
	// starts the run once (whenServed).
	start := orchestrator.HarnessTrigger{Payload: newRunStart(cfg, text)}
	err = whenServed(ctx, cfg.reconnectWait, cfg.notes, link.await, func() error {
		return e.Trigger(ctx, "harness::trigger", start, &struct {
			StatusCode int                          `json:"status_code"`
			Body       *orchestrator.RunStartResult `json:"body"`
		}{Body: &res})
	})
	if err != nil {
		return "", err
	}
	if !res.Started {
		return "", fmt.Errorf("session %s is busy (%s)", cfg.session, res.Reason)
	}
	// In line mode the approval requests are put to the user one at a
	// time: asking is the one on screen, whose answer comes on answers.
	var (
		asking  *agent.Event
		queued  []agent.Event
		answers <-chan string
	)
	put := func(ev agent.Event) {
		args := argsJSON(ev.Args)
		if lines == nil {
			req := map[string]string{"session_id": ev.SessionID, "function_call_id": ev.FunctionCallID, "decision": "allow"}
			fmt.Fprintf(out, "? %s %s needs approval; waiting. Allow it with (decision deny or aborted to refuse):\n  iii trigger approval::resolve %s\n",
				ev.FunctionID, clip(args, 200), shellJSON(req))
			return
		}
		if asking != nil {
			queued = append(queued, ev)
			return
		}
		fmt.Fprintf(out, "? %s %s needs approval. Allow? [y]es / [n]o / [a]bort the run: ", ev.FunctionID, clip(args, 200))
		asking, answers = &ev, lines.lines
	}
	// next puts the next queued request, if any, once asking is done with.
	next := func() {
		asking, answers = nil, nil
		if len(queued) > 0 {
			ev := queued[0]
			queued = queued[1:]
			put(ev)
		}
	}
	// settled drops the question about call id, decided by someone else
	// (approval::resolve, another chat) or ended with the run: its answer
	// would be refused, and a line typed for it would answer the next.
	settled := func(id string) {
		queued = slices.DeleteFunc(queued, func(q agent.Event) bool { return q.FunctionCallID == id })
		if asking != nil && asking.FunctionCallID == id {
			fmt.Fprintf(out, "\n(%s was decided elsewhere; no answer needed)\n", id)
			next()
		}
	}
	streamed, parked := false, 0
	last := time.Now()
	tick := time.NewTicker(linkCheck)
	defer tick.Stop()
	for {
		var m jetstream.Msg
		select {
		case <-ctx.Done():
			if asking != nil {
				// Interrupted at the question: the call stays parked.
				return "", fmt.Errorf("interrupted; %s stays parked in session %s: %w", asking.FunctionCallID, sid, ctx.Err())
			}
			// Interrupted: the run goes on without this client.
			return "", fmt.Errorf("interrupted; session %s runs on without this client: %w", sid, ctx.Err())
		case <-consumeEnded:
			if nc.IsClosed() {
				return "", lost("the connection was closed")
			}
			return "", fmt.Errorf("session %s: the event stream ended before the turn did (no agent_end)", sid)
		case <-tick.C:
			up, why := link.check()
			if why != "" {
				return "", lost(why)
			}
			if !up {
				continue
			}
			if link.returned {
				link.returned, last = false, time.Now()
			}
			if parked > 0 || asking != nil || time.Since(last) < cfg.quiet {
				continue // a human may take longer
			}
			return "", fmt.Errorf("session %s: no event for %v; the turn may still be running", sid, cfg.quiet)
		case line, ok := <-answers:
			ev := *asking
			decision := agent.DecisionDeny
			switch strings.ToLower(strings.TrimSpace(line)) {
			case "y", "yes":
				decision = agent.DecisionAllow
			case "a", "abort":
				decision = agent.DecisionAborted
			}
			if !ok { // the end of the input
				decision = agent.DecisionAborted
			}
			if decision == agent.DecisionAborted {
				queued = nil // the run ends
			}
			req := map[string]string{
				"session_id": ev.SessionID, "function_call_id": ev.FunctionCallID, "decision": decision, "reason": "decided in iii chat",
			}
			if err := resolveDecision(ctx, e, req, resolveAttempt); err != nil {
				fmt.Fprint(out, decisionFailed(err, req))
			}
			last = time.Now()
			next()
			continue
		case m = <-msgs:
		}
		last = time.Now()
		var ev agent.Event
		if json.Unmarshal(m.Data(), &ev) != nil {
			continue
		}
		switch ev.Type {
		case agent.EventMessageUpdate:
			if ev.Partial != nil && streamed {
				// A stream that restarted after a crash starts over.
				fmt.Fprint(out, "\n[stream restarted]\n")
			}
			fmt.Fprint(out, ev.Delta)
			streamed = true
		case agent.EventMessageComplete:
			if ev.Message == nil || ev.Message.Role != agent.RoleAssistant {
				continue // the user's own messages
			}
			text := ""
			for _, c := range ev.Message.Content {
				if c.Type == agent.ContentText {
					text += c.Text
				}
			}
			if !streamed && text != "" {
				fmt.Fprint(out, text)
			}
			if streamed || text != "" {
				fmt.Fprintln(out)
			}
			if ev.Message.ErrorMessage != "" {
				fmt.Fprintf(out, "error: %s\n", ev.Message.ErrorMessage)
			}
			streamed = false
		case agent.EventFunctionExecutionStart:
			fmt.Fprintf(out, "→ %s %s\n", ev.FunctionID, argsJSON(ev.Args))
		case agent.EventFunctionExecutionEnd:
			settled(ev.FunctionCallID)
			status := "ok"
			if ev.IsError {
				status = "error"
			}
			var text string
			if ev.Result != nil {
				for _, c := range ev.Result.Content {
					text += c.Text
				}
			}
			fmt.Fprintf(out, "← %s (%s, %d ms) %s\n", ev.FunctionCallID, status, ev.DurationMs, clip(text, 200))
		case agent.EventApprovalRequested:
			if asking != nil && asking.FunctionCallID == ev.FunctionCallID ||
				slices.ContainsFunc(queued, func(q agent.Event) bool { return q.FunctionCallID == ev.FunctionCallID }) {
				continue // delivered again (a node that restarted)
			}
			parked++
			put(ev)
		case agent.EventTurnStateChanged:
			// The view lists the calls still parked: a batch goes back to
			// function_execute while one of its calls runs (one allowed).
			switch {
			case ev.View != nil:
				parked = len(ev.View.AwaitingApproval)
			case ev.State != agent.StateFunctionAwaitingApproval:
				parked = 0
			}
			if asking != nil && ev.View != nil && !slices.ContainsFunc(ev.View.AwaitingApproval, func(p agent.PendingApproval) bool {
				return p.FunctionCallID == asking.FunctionCallID
			}) {
				settled(asking.FunctionCallID)
			}
		case agent.EventAgentEnd:
			if asking != nil {
				settled(asking.FunctionCallID)
			}
			if ev.StopReason != agent.StopEnd {
				fmt.Fprintf(out, "[%s]\n", ev.StopReason)
			}
			return ev.StopReason, nil
		}
	}
}

// newRunStart is the run a line of text starts, with an idempotency key
// of its own.
func newRunStart(cfg chatConfig, text string) agent.RunStart {
	return agent.RunStart{
		SessionID: cfg.session, Provider: cfg.provider, Model: cfg.model, Sandbox: cfg.sandbox,
		Messages:       []agent.Message{{Role: agent.RoleUser, Content: []agent.Content{{Type: agent.ContentText, Text: text}}, Timestamp: time.Now().UnixMilli()}},
		IdempotencyKey: "chat-" + nuid.Next(),
	}
}

// argsJSON is how a call's arguments are shown: none travel as none
// (omitempty), and the function gets {}.
func argsJSON(args map[string]any) string {
	if len(args) == 0 {
		return "{}"
	}
	b, _ := wire.MarshalJSON(args)
	return string(b)
}

// link watches a turn's connection to the node when asked (once per
// linkCheck): it says on notes when the connection is lost and when it is
// back, and gives up on a node that stays away for wait.
type link struct {
	nc       *nats.Conn
	wait     time.Duration
	notes    io.Writer
	down     time.Time // when the connection was lost; zero while it is up
	returned bool      // the connection came back since the caller last looked
}

// check looks at the connection: up says it is connected; why, when not
// "", says why the node counts as lost (the connection closed, or stayed
// down for l.wait).
func (l *link) check() (up bool, why string) {
	switch {
	case l.nc.IsClosed():
		return false, "the connection was closed"
	case !l.nc.IsConnected():
		if l.down.IsZero() {
			l.down = time.Now()
			fmt.Fprintf(l.notes, "(lost the connection to the node; waiting up to %v for it to come back)\n", l.wait)
		}
		if time.Since(l.down) >= l.wait {
			return false, fmt.Sprintf("the node did not come back within %v", l.wait)
		}
		return false, ""
	case !l.down.IsZero():
		l.down, l.returned = time.Time{}, true
		fmt.Fprintf(l.notes, "(reconnected to %s)\n", redactURL(l.nc.ConnectedUrl()))
	}
	return true, ""
}

// await waits until the connection is up (why is "") or the node counts
// as lost (why says why), or ctx ends.
func (l *link) await(ctx context.Context) (why string, err error) {
	tick := time.NewTicker(linkCheck)
	defer tick.Stop()
	for {
		if up, why := l.check(); up || why != "" {
			return why, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
}

// shellJSON is v as JSON quoted for a POSIX shell: the argument of a
// command chat prints for the user to run. Ids chosen by a model (a
// function call id) may hold a quote or any shell-special character.
func shellJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return shellQuote(strings.TrimSuffix(b.String(), "\n"))
}

// shellQuote quotes s as one word for a POSIX shell: in single quotes,
// inside which only a single quote is special; each one in s closes the
// quotes, adds an escaped quote and opens them again.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// linkCheck is how often a turn looks at its connection: how late chat
// may notice that it lost the node, or that the node came back.
const linkCheck = 250 * time.Millisecond

// resolveAttempt bounds one approval::resolve call of `iii chat`.
const resolveAttempt = 10 * time.Second

// resolveDecision sends an approval decision, and sends it again while
// the answer is a retryable error (timeout, unavailable, conflict), for
// three attempts' time: a timeout may hide a decision that was recorded,
// and approval::resolve answers the same decision asked again with ok, so
// a lost reply is not reported as a failure.
func resolveDecision(ctx context.Context, e *engine.Engine, req map[string]string, attempt time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 3*attempt)
	defer cancel()
	return engine.Retry(ctx, attempt, func(ctx context.Context) error {
		return e.Trigger(ctx, "approval::resolve", req, nil)
	}, func(err error) bool { return wire.From(err).Retryable })
}

// decisionFailed says what is known of the decision req that
// resolveDecision failed to send with err. Only a refusal (not_pending,
// invalid_payload, forbidden) says it was not recorded; after a timeout
// or any other error it may have been, and the commands to check and to
// send it again (safe: the same decision again is answered ok) are
// printed.
func decisionFailed(err error, req map[string]string) string {
	we := wire.From(err) // one line, without the attempts' context errors
	switch we.Code {
	case wire.CodeNotPending:
		return fmt.Sprintf("decision not recorded (%v): the call was decided otherwise or is not waiting\n", we)
	case wire.CodeInvalidPayload, wire.CodeForbidden:
		return fmt.Sprintf("decision not recorded (%v); the call stays parked\n", we)
	}
	list := shellJSON(map[string]string{"session_id": req["session_id"]})
	return fmt.Sprintf("the decision may or may not have been recorded (%v). The call is listed while it waits:\n"+
		"  iii trigger approval::list_pending %s\nSending the decision again is safe:\n  iii trigger approval::resolve %s\n", we, list, shellJSON(req))
}

// clip shortens s to at most n bytes and an ellipsis, cutting before a
// character rather than through one.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
