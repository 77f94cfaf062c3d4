package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

func newTriggerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "trigger FUNCTION_ID [JSON|-]",
		Short: "Call a function and print its result as JSON",
		Long: "Call a function synchronously. The payload is a JSON document (default {}); '-' reads it from stdin.\n" +
			"On a coded error the error envelope is printed to stderr and the exit status is 1.",
		Example: `  iii trigger engine::functions::list
  iii trigger state::set '{"scope":"demo","key":"greeting","value":"hello"}'
  echo '{"scope":"demo","key":"greeting"}' | iii trigger state::get -`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			payload := []byte("{}")
			if len(args) == 2 {
				payload = []byte(args[1])
				if args[1] == "-" {
					b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
					if err != nil {
						return err
					}
					payload = b
				}
			}
			if !json.Valid(payload) {
				return wire.Errorf(wire.CodeInvalidPayload, "payload is not valid JSON")
			}
			e, done, err := g.connect()
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			body, _, err := e.TriggerRaw(ctx, args[0], payload, wire.JSON)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), body)
		},
	}
}

// connectFollowing is connect for a client that follows a run for a
// long time (iii chat): it reconnects without a limit and notices a
// silent node (a frozen host, a cut network) within tens of seconds,
// where nats.go's defaults give up after about two minutes of attempts
// and take minutes to notice a dead peer. The caller bounds how long it
// waits for the node to come back (it watches the connection's status).
func (g *globals) connectFollowing() (*engine.Engine, func(), error) {
	nc, err := nats.Connect(g.natsURL, nats.Name("iii-cli"), nats.Timeout(5*time.Second),
		nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond),
		nats.PingInterval(5*time.Second), nats.MaxPingsOutstanding(3))
	if err != nil {
		return nil, nil, connectError(g.natsURL, err)
	}
	e, err := engine.New(nc, engine.WithDefaultTimeout(g.timeout), engine.WithCodec(wire.JSON))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return e, nc.Close, nil
}

func printJSON(w io.Writer, body []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		out.Reset()
		out.Write(body)
	}
	out.WriteByte('\n')
	// Valid JSON holds no raw C0 control, and safeText shows the others
	// as JSON's own \u escapes: the JSON means the same.
	_, err := terminal(w).Write(out.Bytes())
	return err
}

func newFunctionsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "functions",
		Short: "List every function registered on the bus",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every page: a catalog larger than the max payload comes in
			// several.
			var resp engine.FunctionsListResponse
			for req := (engine.FunctionsListRequest{}); ; {
				var page engine.FunctionsListResponse
				if err := g.call(cmd.Context(), "engine::functions::list", req, &page); err != nil {
					return err
				}
				resp.Functions = append(resp.Functions, page.Functions...)
				resp.Incomplete = resp.Incomplete || page.Incomplete
				if !page.Truncated || len(page.Functions) == 0 {
					break
				}
				req.After = page.Functions[len(page.Functions)-1].ID
			}
			if resp.Incomplete {
				fmt.Fprintln(cmd.ErrOrStderr(), "iii: the catalog may be incomplete: the discovery dropped replies (see the node's log)")
			}
			if asJSON {
				b, _ := json.Marshal(resp)
				return printJSON(cmd.OutOrStdout(), b)
			}
			tw := tabwriter.NewWriter(terminal(cmd.OutOrStdout()), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FUNCTION\tWORKER\tDESCRIPTION")
			for _, f := range resp.Functions {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", f.ID, f.Worker, f.Description)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func newWorkersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "workers",
		Short: "List every worker instance on the bus",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp engine.WorkersListResponse
			for req := (engine.WorkersListRequest{}); ; {
				var page engine.WorkersListResponse
				if err := g.call(cmd.Context(), "engine::workers::list", req, &page); err != nil {
					return err
				}
				resp.Workers = append(resp.Workers, page.Workers...)
				resp.Incomplete = resp.Incomplete || page.Incomplete
				if !page.Truncated || len(page.Workers) == 0 {
					break
				}
				last := page.Workers[len(page.Workers)-1]
				req.After = last.Name + "/" + last.ID
			}
			if resp.Incomplete {
				fmt.Fprintln(cmd.ErrOrStderr(), "iii: the worker list may be incomplete: the discovery dropped replies (see the node's log)")
			}
			tw := tabwriter.NewWriter(terminal(cmd.OutOrStdout()), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tVERSION\tID\tFUNCTIONS")
			for _, w := range resp.Workers {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", w.Name, w.Version, w.ID, len(w.Functions))
			}
			return tw.Flush()
		},
	}
}

// connectError is the error of a failed nats.Connect to servers (--nats),
// with the credentials of the URLs hidden. nats.go quotes a URL that does
// not parse, password included, and its reason ("invalid port \":p4ss\"")
// may hold part of it: with credentials in the URL only the redacted URL
// is said, with a hint at the usual cause.
func connectError(servers string, err error) error {
	shown := redactURL(servers)
	var ue *url.Error
	if errors.As(err, &ue) {
		if shown != servers {
			return fmt.Errorf("connect to %s: --nats does not parse as a list of URLs (a user name or password with one of : / @ , %% # ? or a space must be percent-encoded)", shown)
		}
		return fmt.Errorf("connect to %s: --nats does not parse as a list of URLs: %v", shown, ue.Err)
	}
	return fmt.Errorf("connect to %s (is `iii up` running? set --nats): %w", shown, err)
}

// redacted stands for a password or token that is not shown.
const redacted = "xxxxx"

// redactURL returns servers, a comma-separated list of NATS URLs as nats.Connect
// takes them (the scheme optional), with every password replaced by
// "xxxxx" and every token (user info without a password) by "xxxxx": it is
// printed on terminals and in logs. It works on the text rather than on
// url.Parse, which refuses some of the URLs a user may give (and then
// would show them whole); where the text is ambiguous it hides more, not
// less: user info runs to the last '@' of a URL, and a part of the list
// without a scheme and with an '@' continues a URL without one (a
// password with a ',' in it).
func redactURL(servers string) string {
	var urls []string
	for _, p := range strings.Split(servers, ",") {
		if n := len(urls); n > 0 && !hasScheme(p) && strings.Contains(p, "@") && !strings.Contains(urls[n-1], "@") {
			urls[n-1] += "," + p
			continue
		}
		urls = append(urls, p)
	}
	for i, u := range urls {
		urls[i] = redactOne(u)
	}
	return strings.Join(urls, ",")
}

// redactOne hides the password or token of one URL.
func redactOne(u string) string {
	scheme, rest := "", u
	if hasScheme(u) {
		i := strings.Index(u, "://") + len("://")
		scheme, rest = u[:i], u[i:]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		user = redacted // a token
	} else {
		user += ":" + redacted
	}
	return scheme + user + rest[at:]
}

// hasScheme reports whether u starts with "scheme://" (RFC 3986: a letter,
// then letters, digits, '+', '-' or '.').
func hasScheme(u string) bool {
	u = strings.TrimLeft(u, " \t")
	i := strings.Index(u, "://")
	if i <= 0 {
		return false
	}
	for j := 0; j < i; j++ {
		c := u[j]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}
