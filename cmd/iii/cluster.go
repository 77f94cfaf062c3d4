package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/cluster/region"
)

// newClusterCmd groups the commands about the grain cluster.
func newClusterCmd(g *globals) *cobra.Command {
	cmd := group(&cobra.Command{Use: "cluster", Short: "The nodes that share the session grains"})
	var (
		name   string
		asJSON bool
	)
	members := &cobra.Command{
		Use:   "members",
		Short: "List the grain cluster's members (the membership bucket iii-members)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, done, err := g.connect()
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			list, err := membership.List(ctx, e.JetStream(), name)
			if err != nil {
				return err
			}
			if asJSON {
				b, _ := json.Marshal(list)
				return printJSON(cmd.OutOrStdout(), b)
			}
			tw := tabwriter.NewWriter(terminal(cmd.OutOrStdout()), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MEMBER\tNODE\tADDRESS\tSTATUS\tKINDS\tSTARTED")
			for _, m := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s:%d\t%s\t%v\t%s\n", m.ID, m.Meta["node"], m.Host, m.Port, m.Status, m.Kinds, m.Started.Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	members.Flags().StringVar(&name, "cluster", "iii", "grain cluster name (iii up's nodes always form the one named iii, whatever their --cluster or --region)")
	members.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(members)
	return cmd
}

// newRegionCmd groups the region commands (cluster/region, docs/REGIONS.md).
func newRegionCmd(g *globals) *cobra.Command {
	cmd := group(&cobra.Command{Use: "region", Short: "Read mirrors in another region, and region takeover (docs/REGIONS.md)"})
	var (
		here, lost string
		asJSON     bool
	)
	withJS := func(cmd *cobra.Command, timeout time.Duration, run func(ctx context.Context, js jetstream.JetStream) (any, error)) error {
		e, done, err := g.connect()
		if err != nil {
			return err
		}
		defer done()
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		out, err := run(ctx, e.JetStream())
		if out != nil {
			if asJSON {
				b, _ := json.Marshal(out)
				if perr := printJSON(cmd.OutOrStdout(), b); perr != nil {
					return perr
				}
			} else {
				printRegion(cmd.OutOrStdout(), out)
			}
		}
		return err
	}
	mirror := &cobra.Command{
		Use:   "mirror",
		Short: "Mirror every iii stream and bucket homed elsewhere into --region (idempotent: run it again after new ones appear)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withJS(cmd, 2*time.Minute, func(ctx context.Context, js jetstream.JetStream) (any, error) {
				rep, err := region.Mirror(ctx, js, here)
				return rep, err
			})
		},
	}
	lag := &cobra.Command{
		Use:   "lag",
		Short: "How many messages each mirror in --region is behind its origin",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withJS(cmd, g.timeout, func(ctx context.Context, js jetstream.JetStream) (any, error) {
				l, err := region.Lag(ctx, js, here)
				return l, err
			})
		},
	}
	takeover := &cobra.Command{
		Use:   "takeover",
		Short: "The home region --lost is gone: make --region the home of its streams, under their own names",
		Long: "Refuses any origin that still answers. Stop (or fence) the lost region first: writes it acks\n" +
			"after the cut are lost. Resumable: run it again after an interruption.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withJS(cmd, 5*time.Minute, func(ctx context.Context, js jetstream.JetStream) (any, error) {
				rep, err := region.Takeover(ctx, js, lost, here)
				return rep, err
			})
		},
	}
	for _, c := range []*cobra.Command{mirror, lag, takeover} {
		c.Flags().StringVar(&here, "region", "", "the region to mirror into, or to take over in (its NATS cluster name)")
		_ = c.MarkFlagRequired("region")
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	takeover.Flags().StringVar(&lost, "lost", "", "the lost home region")
	_ = takeover.MarkFlagRequired("lost")
	cmd.AddCommand(mirror, lag, takeover)
	return cmd
}

// printRegion prints a region report or a lag map as a table.
func printRegion(w io.Writer, out any) {
	tw := tabwriter.NewWriter(terminal(w), 0, 4, 2, ' ', 0)
	switch v := out.(type) {
	case region.Report:
		fmt.Fprintln(tw, "STREAM\tMIRROR\tHOME\tMESSAGES\tLAST SEQ\tACTION\tREASON")
		for _, s := range v.Streams {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Stream, s.Mirror, s.Home, s.Messages, s.LastSeq, s.Action, s.Reason)
		}
		fmt.Fprintf(tw, "took %v\n", v.Took.Round(time.Millisecond))
	case map[string]uint64:
		names := make([]string, 0, len(v))
		for k := range v {
			names = append(names, k)
		}
		sort.Strings(names)
		fmt.Fprintln(tw, "MIRROR\tBEHIND")
		for _, k := range names {
			fmt.Fprintf(tw, "%s\t%d\n", k, v[k])
		}
	}
	_ = tw.Flush()
}
