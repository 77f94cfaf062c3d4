package budget

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// AlertType is the type of every alert event.
const AlertType = "budget_alert"

// AlertRetention is how long the alert stream keeps alerts.
const AlertRetention = 30 * 24 * time.Hour

// Alert is published (JSON) on subjects.BudgetAlertSubjectPrefix +
// budget id when a budget's spend reaches one of its thresholds: once per
// threshold and period.
type Alert struct {
	// Type is [AlertType].
	Type     string `json:"type"`
	BudgetID string `json:"budget_id"`
	// Threshold is the fraction of the ceiling reached.
	Threshold  float64 `json:"threshold"`
	SpentUSD   float64 `json:"spent_usd"`
	CeilingUSD float64 `json:"ceiling_usd"`
	// PeriodStart is Unix milliseconds.
	PeriodStart int64  `json:"period_start"`
	Period      Period `json:"period"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
}

// MsgID is the alert's Nats-Msg-Id, "<budget>:<period_start>:<threshold>",
// so the stream drops a repeated publish of the same alert.
func (a Alert) MsgID() string {
	return a.BudgetID + ":" + strconv.FormatInt(a.PeriodStart, 10) + ":" + strconv.FormatFloat(a.Threshold, 'g', -1, 64)
}

// AlertStreamConfig is the stream that keeps budget alerts for
// [AlertRetention].
func AlertStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        subjects.BudgetAlertStream,
		Description: "iii budget alerts: a budget's spend reached one of its thresholds",
		Subjects:    []string{subjects.BudgetAlertSubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      AlertRetention,
	}
}

// alertPublishAttempts bounds the publishes of one alert.
const alertPublishAttempts = 3

// publishAlerts announces thresholds of b reached in the period starting
// at start. The thresholds are already marked in the period state, so a
// publish that fails every attempt is logged and lost, never repeated.
func (l *Ledger) publishAlerts(ctx context.Context, b Budget, start time.Time, spent float64, thresholds []float64) {
	if len(thresholds) == 0 {
		return
	}
	// The spend is recorded: announce it even if the caller gave up.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, t := range thresholds {
		a := Alert{
			Type: AlertType, BudgetID: b.BudgetID, Threshold: t, SpentUSD: round(spent), CeilingUSD: b.CeilingUSD,
			PeriodStart: start.UnixMilli(), Period: b.Period, WorkspaceID: b.WorkspaceID, AgentID: b.AgentID,
		}
		data, err := wire.MarshalJSON(a)
		if err != nil {
			l.logger.Error("budget alert does not encode", "budget_id", b.BudgetID, "error", err)
			continue
		}
		for attempt := 1; ; attempt++ {
			msg := &nats.Msg{Subject: subjects.BudgetAlertSubjectPrefix + b.BudgetID, Data: data, Header: nats.Header{}}
			msg.Header.Set(wire.HeaderContentType, wire.ContentJSON)
			_, err = l.js.PublishMsg(ctx, msg, jetstream.WithMsgID(a.MsgID()))
			if err == nil || attempt == alertPublishAttempts || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			l.logger.Warn("budget alert not published", "budget_id", b.BudgetID, "threshold", t, "error", err)
		}
	}
}
