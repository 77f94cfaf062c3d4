package models

import (
	"strings"

	"github.com/iii-on-nats/iii/agent"
)

// Function ids the worker serves.
const (
	ListFunction      = "models::list"
	GetFunction       = "models::get"
	SupportsFunction  = "models::supports"
	ReconcileFunction = "models::reconcile"
)

// ProviderModelsFunction is the function a provider worker serves for
// models::reconcile: provider::<name>::models {} → [ProviderModelsResponse].
func ProviderModelsFunction(provider string) string {
	return "provider::" + provider + "::models"
}

// MaxProviderModels bounds the models of one provider answer.
const MaxProviderModels = 4096

// Model is a model as models::list and models::get answer it: the catalog
// entry (or the reconciled record) and its availability.
type Model struct {
	Entry
	// Available is false once models::reconcile found that the provider no
	// longer lists the model; true otherwise (never checked counts as
	// available).
	Available bool `json:"available"`
	// Reconciled marks a model the embedded catalog lacks and a provider
	// listed: its capabilities are unknown (false) and its prices zero
	// until an override file describes it.
	Reconciled bool `json:"reconciled,omitempty"`
}

// Clone returns a deep copy of m.
func (m Model) Clone() Model {
	m.Entry = cloneEntry(m.Entry)
	return m
}

// validCapability reports whether c is one of the agent.Capability*
// constants.
func validCapability(c string) bool {
	switch c {
	case agent.CapabilityTools, agent.CapabilityVision, agent.CapabilityThinking, agent.CapabilityCache:
		return true
	}
	return false
}

func checkCapability(c string) error {
	if !validCapability(c) {
		return invalid("capability must be %q, %q, %q or %q, not %.64q",
			agent.CapabilityTools, agent.CapabilityVision, agent.CapabilityThinking, agent.CapabilityCache, c)
	}
	return nil
}

func checkProvider(p string) error {
	if err := agent.ValidateID("provider", p); err != nil {
		return invalidWrap(err)
	}
	return nil
}

func checkModelID(id string) error {
	if err := ValidateModelID(id); err != nil {
		return invalidWrap(err)
	}
	return nil
}

// ListRequest is the request of models::list; every field is optional.
type ListRequest struct {
	// Provider keeps only that provider's models.
	Provider string `json:"provider,omitempty"`
	// Capability keeps only models with that capability (agent.Capability*).
	Capability string `json:"capability,omitempty"`
	// After continues a truncated list: "<provider>/<id>" of the last model
	// received ([ListCursor]); only models sorted after it are listed.
	After string `json:"after,omitempty"`
}

// Validate checks the request; every error is invalid_payload.
func (r ListRequest) Validate() error {
	if r.Provider != "" {
		if err := checkProvider(r.Provider); err != nil {
			return err
		}
	}
	if r.Capability != "" {
		if err := checkCapability(r.Capability); err != nil {
			return err
		}
	}
	if r.After != "" {
		if _, _, err := parseListCursor(r.After); err != nil {
			return err
		}
	}
	return nil
}

// ListCursor is the [ListRequest.After] of a list that ended with m:
// "<provider>/<id>" (a provider has no '/', so the first one splits it).
func ListCursor(m Model) string { return m.Provider + "/" + m.ID }

// parseListCursor splits an After cursor; every error is invalid_payload.
func parseListCursor(after string) (provider, id string, err error) {
	provider, id, ok := strings.Cut(after, "/")
	if !ok {
		return "", "", invalid("after %.80q is not <provider>/<model id>", after)
	}
	if err := checkProvider(provider); err != nil {
		return "", "", err
	}
	if err := checkModelID(id); err != nil {
		return "", "", err
	}
	return provider, id, nil
}

// ListResponse is the answer of models::list, sorted by provider then id;
// never null.
type ListResponse struct {
	Models []Model `json:"models"`
	// Truncated is set when the server's max payload cut the list short:
	// ask again with After set to [ListCursor] of the last model.
	Truncated bool `json:"truncated,omitempty"`
}

// GetRequest is the request of models::get.
type GetRequest struct {
	Provider string `json:"provider"`
	// ModelID is the model's id or one of its aliases.
	ModelID string `json:"model_id"`
}

// Validate checks the request; every error is invalid_payload.
func (r GetRequest) Validate() error {
	if err := checkProvider(r.Provider); err != nil {
		return err
	}
	return checkModelID(r.ModelID)
}

// SupportsRequest is the request of models::supports.
type SupportsRequest struct {
	Provider string `json:"provider"`
	ModelID  string `json:"model_id"`
	// Capability is one of agent.CapabilityTools, CapabilityVision,
	// CapabilityThinking, CapabilityCache.
	Capability string `json:"capability"`
}

// Validate checks the request; every error is invalid_payload.
func (r SupportsRequest) Validate() error {
	if err := checkProvider(r.Provider); err != nil {
		return err
	}
	if err := checkModelID(r.ModelID); err != nil {
		return err
	}
	return checkCapability(r.Capability)
}

// SupportsResponse is the answer of models::supports.
type SupportsResponse struct {
	Supported bool `json:"supported"`
}

// ReconcileRequest is the request of models::reconcile.
type ReconcileRequest struct {
	Provider string `json:"provider"`
}

// Validate checks the request; every error is invalid_payload.
func (r ReconcileRequest) Validate() error { return checkProvider(r.Provider) }

// ReconcileResponse is the answer of models::reconcile; the lists are
// sorted and never null. Over the bus the lists are cut to fit the
// server's max payload: Added first, then Missing, then
// Known, each *Omitted counting the ids its list left out (the list's
// length plus its *Omitted is the whole count). [Store.Reconcile]
// answers whole lists.
type ReconcileResponse struct {
	Provider string `json:"provider"`
	// Known are the ids the provider lists that the catalog has (by id or
	// alias), as the provider spells them.
	Known []string `json:"known"`
	// Added are the ids the provider lists that the catalog lacks: they are
	// in the bucket as reconciled models.
	Added []string `json:"added"`
	// Missing are the catalog's (and earlier reconciled) models the provider
	// no longer lists: still listed, with available false. A reconciled
	// model missing for longer than the retention ([WithMissingRetention])
	// is dropped from the bucket instead, and counted in Dropped.
	Missing []string `json:"missing"`
	// Skipped counts the provider's models that were dropped: an invalid
	// id, or one listed twice.
	Skipped int `json:"skipped,omitempty"`
	// Dropped counts the reconciled models this run deleted from the
	// bucket: missing for longer than the retention.
	Dropped int `json:"dropped,omitempty"`
	// KnownOmitted, AddedOmitted and MissingOmitted count the ids left out
	// of Known, Added and Missing to fit the server's max payload.
	KnownOmitted   int `json:"known_omitted,omitempty"`
	AddedOmitted   int `json:"added_omitted,omitempty"`
	MissingOmitted int `json:"missing_omitted,omitempty"`
}

// ProviderModelsResponse is what provider::<name>::models answers.
type ProviderModelsResponse struct {
	Models []ProviderModel `json:"models"`
}

// ProviderModel is one model a provider lists.
type ProviderModel struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
	// CreatedAt is whatever the provider reports (RFC 3339 text or Unix
	// seconds); the catalog does not use it.
	CreatedAt any `json:"created_at,omitempty"`
}
