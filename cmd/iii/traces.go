package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iii-on-nats/iii/workers/traces"
)

// newTracesCmd lists traces grouped by session, message or function
// (engine::traces::group_by) and prints one as a tree (::tree).
func newTracesCmd(g *globals) *cobra.Command {
	var (
		by     string
		since  time.Duration
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "traces",
		Short:   "List the trace store's traces by session (or message, function); `iii traces show ID` prints one",
		Example: "  iii traces\n  iii traces --by function --since 10m\n  iii traces show 4bf92f3577b34da6a3ce929d0e0e4736",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			attr := map[string]string{"session": "iii.session.id", "message": "iii.message.id", "function": "iii.function.id"}[by]
			if attr == "" {
				return fmt.Errorf("--by %q: want session, message or function", by)
			}
			// A negative window (a sign typed by mistake) listed every
			// trace, as 0 does, without a word.
			if since < 0 {
				return fmt.Errorf("--since %v: want 0 (all) or more", since)
			}
			req := map[string]any{"attribute": attr, "limit": limit}
			if since > 0 {
				req["since_ms"] = time.Now().Add(-since).UnixMilli()
			}
			var resp traces.GroupByResponse
			if err := g.call(cmd.Context(), traces.GroupByFunction, req, &resp); err != nil {
				return err
			}
			if asJSON {
				b, _ := json.Marshal(resp)
				return printJSON(cmd.OutOrStdout(), b)
			}
			tw := tabwriter.NewWriter(terminal(cmd.OutOrStdout()), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "%s\tTRACES\tSPANS\tERRORS\tLAST SEEN\tNEWEST TRACE\n", strings.ToUpper(by))
			for _, gr := range resp.Groups {
				newest := ""
				if len(gr.TraceIDs) > 0 {
					newest = gr.TraceIDs[0]
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", gr.Value, gr.TraceCount, gr.SpanCount, gr.ErrorCount,
					time.UnixMilli(gr.LastSeenMs).Format(time.TimeOnly), newest)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&by, "by", "session", "group by session, message or function")
	cmd.Flags().DurationVar(&since, "since", 0, "only spans that ended this recently (0: all)")
	cmd.Flags().IntVar(&limit, "limit", traces.DefaultGroupLimit, "groups to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")

	show := &cobra.Command{
		Use:   "show TRACE_ID",
		Short: "Print one trace as a tree of spans",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp traces.TreeResponse
			if err := g.call(cmd.Context(), traces.TreeFunction, map[string]string{"trace_id": args[0]}, &resp); err != nil {
				return err
			}
			if asJSON {
				b, _ := json.Marshal(resp)
				return printJSON(cmd.OutOrStdout(), b)
			}
			return printTree(cmd.OutOrStdout(), resp)
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a tree")
	cmd.AddCommand(show)
	return cmd
}

// printTree prints a trace as a tree of spans. Span names, status
// messages (a tool's or a provider's error) and attributes are written by
// others, so they reach the terminal through safeText, as the list's
// table does. A tree the store cut (more spans than one answer holds)
// says so: the count is of the whole trace.
func printTree(w io.Writer, resp traces.TreeResponse) error {
	w = terminal(w)
	cut := ""
	if resp.Truncated {
		cut = " (truncated: the earliest spans only)"
	}
	if _, err := fmt.Fprintf(w, "trace %s: %d spans, %d errors, %d ms%s\n", resp.TraceID, resp.SpanCount, resp.ErrorCount, resp.DurationMs, cut); err != nil {
		return err
	}
	for _, n := range resp.Spans {
		printSpan(w, n, 0)
	}
	return nil
}

// printSpan prints n and its children, indented by depth.
func printSpan(w io.Writer, n *traces.TreeNode, depth int) {
	mark := ""
	switch {
	case n.MissingParent:
		mark = " (parent not stored)"
	case n.Detached:
		mark = " (detached: its parent is " + strconv.Itoa(traces.MaxTreeDepth) + " levels deep)"
	}
	status := ""
	if n.Status == "error" {
		status = " ERROR " + n.StatusMessage
	}
	ids := ""
	if sid, _ := n.StringAttribute("iii.session.id"); sid != "" {
		ids = " session=" + sid
	}
	fmt.Fprintf(w, "%s%s %.2f ms%s%s%s\n", strings.Repeat("  ", depth), n.Name, n.DurationMs, status, ids, mark)
	for _, c := range n.Children {
		printSpan(w, c, depth+1)
	}
}
