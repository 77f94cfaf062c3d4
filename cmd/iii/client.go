package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
		return nil, nil, fmt.Errorf("connect to %s (is `iii up` running? set --nats): %w", g.natsURL, err)
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
	_, err := w.Write(out.Bytes())
	return err
}

func newFunctionsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "functions",
		Short: "List every function registered on the bus",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp engine.FunctionsListResponse
			if err := g.call(cmd.Context(), "engine::functions::list", nil, &resp); err != nil {
				return err
			}
			if asJSON {
				b, _ := json.Marshal(resp)
				return printJSON(cmd.OutOrStdout(), b)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
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
			if err := g.call(cmd.Context(), "engine::workers::list", nil, &resp); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tVERSION\tID\tFUNCTIONS")
			for _, w := range resp.Workers {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", w.Name, w.Version, w.ID, len(w.Functions))
			}
			return tw.Flush()
		},
	}
}
