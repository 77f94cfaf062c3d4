package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
)

// ReplicaComparison is the bench run twice on the same number of nodes:
// every stream and bucket with one replica, then with three, each on a
// fresh stack.
type ReplicaComparison struct {
	R1 Result `json:"r1"`
	R3 Result `json:"r3"`
	// TurnsRatio is R1's turns/s ÷ R3's: what the two extra replicas cost
	// the turn loop (2 means R3 runs half as many turns per second).
	TurnsRatio float64 `json:"r1_r3_turns_per_s_ratio"`
}

// CompareReplicas runs cfg on cfg.Nodes nodes (at least 3) with Replicas
// 1, then again on a fresh stack with Replicas 3, and reports both and the
// ratio of their turns/s. cfg.Replicas must be 0 and cfg.Sessions
// positive. With cfg.Dir set, the runs store under Dir/r1 and Dir/r3;
// cfg.CPUProfile, if set, profiles the R3 run. A failed turn ends the
// comparison: the results so far come back with the error.
func CompareReplicas(ctx context.Context, cfg Config) (ReplicaComparison, error) {
	var c ReplicaComparison
	switch {
	case cfg.Nodes < 3:
		return c, fmt.Errorf("%w: comparing R1 with R3 needs at least 3 nodes, not %d", ErrInvalidConfig, cfg.Nodes)
	case cfg.Replicas != 0:
		return c, fmt.Errorf("%w: the comparison sets the replicas itself (got %d)", ErrInvalidConfig, cfg.Replicas)
	case cfg.Sessions <= 0:
		return c, fmt.Errorf("%w: the comparison needs the turns phase (sessions > 0)", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return c, err
	}
	run := func(replicas int, profile io.Writer) (Result, error) {
		rc := cfg
		rc.Replicas = replicas
		rc.CPUProfile = profile
		if cfg.Dir != "" {
			rc.Dir = filepath.Join(cfg.Dir, fmt.Sprintf("r%d", replicas))
		}
		res, err := Run(ctx, rc)
		if err != nil {
			return res, fmt.Errorf("R%d: %w", replicas, err)
		}
		return res, nil
	}
	var err error
	if c.R1, err = run(1, nil); err != nil {
		return c, err
	}
	if c.R3, err = run(3, cfg.CPUProfile); err != nil {
		return c, err
	}
	if c.R1.Turns != nil && c.R3.Turns != nil && c.R3.Turns.TurnsPerSec > 0 {
		c.TurnsRatio = c.R1.Turns.TurnsPerSec / c.R3.Turns.TurnsPerSec
	}
	return c, nil
}

// WriteTable writes both results as tables and the ratio line
// "R1/R3 turns/s ratio: X.XX".
func (c ReplicaComparison) WriteTable(w io.Writer) error {
	for _, r := range []struct {
		name string
		res  Result
	}{{"R1", c.R1}, {"R3", c.R3}} {
		if _, err := fmt.Fprintf(w, "== %d nodes, %s\n", r.res.Nodes, r.name); err != nil {
			return err
		}
		if err := r.res.WriteTable(w); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "R1/R3 turns/s ratio: %.2f\n", c.TurnsRatio)
	return err
}
