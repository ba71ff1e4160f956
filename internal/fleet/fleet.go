// Package fleet is the device side of wfm: WFM clients (device agents), their
// devices, deployments of catalog versions to devices, the revisions that
// publish them, the per-client state manifest the devices poll, and the status
// reports that move deployments through the lifecycle state machine.
//
// Rules live in internal/lifecycle (state machine) and internal/margo
// (documents, placement, rendering); storage behind Store, which owns every
// transaction so that a revision, its manifest and its state change are
// written together or not at all.
package fleet

import (
	"encoding/json"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// ClientStatus says whether a client may call the device API.
type ClientStatus string

// Client statuses.
const (
	ClientAccepted ClientStatus = "accepted"
	ClientRetired  ClientStatus = "retired"
)

// Client is a WFM client: one device agent identity.
type Client struct {
	ID              string
	Status          ClientStatus
	ManifestVersion uint64
	DeviceCount     int
	CreatedAt       time.Time
	UpdatedAt       time.Time
	RetiredAt       time.Time
}

// Manifest is a client's current state manifest exactly as served.
type Manifest struct {
	ClientID string
	Status   ClientStatus
	Version  uint64
	JSON     []byte
	ETag     string
}

// ClientVersion is what a manifest cache entry is checked against: the
// client's status and current manifest version.
type ClientVersion struct {
	Status          ClientStatus
	ManifestVersion uint64
}

// Device is a device of a client.
type Device struct {
	ClientID       string
	ID             string
	Registered     bool
	Capabilities   json.RawMessage
	ReportedLabels map[string]any
	OperatorLabels map[string]string
	Labels         map[string]any // reported, overridden by operator labels
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// LastSeenAt is when the device was last seen on the device API (a
	// request of its client; see LastSeen), up to about a minute late;
	// zero: not seen since wfm records it.
	LastSeenAt time.Time
}

// Deployment is one application placed on one device.
type Deployment struct {
	ID                string
	ClientID          string
	DeviceID          string
	ApplicationID     string
	Version           lifecycle.Version // of the desired revision
	ProfileID         string
	State             lifecycle.State
	StateReason       string
	StateChangedAt    time.Time
	Revision          int // the desired revision
	InstalledRevision int // 0 when none was confirmed installed
	Parameters        map[string]any
	DesiredSince      uint64 // manifest version that published the desired revision (or the removal)
	Removing          bool
	NewestAdopted     uint64
	Reports           int64
	Generation        int64                   // bumped by every change; what a Precondition expects
	Operation         lifecycle.OperationKind // that published the desired revision
	Strategy          lifecycle.Strategy      // of the desired revision
	Components        []string                // of the desired revision's profile
	// Published is the client's newest manifest version; set only where
	// the store reads it for a decision (RecordReport).
	Published uint64
	// Progress is set when one deployment is read (nil: no extension).
	Progress  *Progress
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Progress is what a drain-aware agent said in its newest report.
type Progress struct {
	Phase      string
	InFlight   *int64
	Healthy    *bool
	Message    string
	ReportedAt time.Time
}

// Revision outcomes.
const (
	OutcomePending    = "pending"
	OutcomeActive     = "active"
	OutcomeSuperseded = "superseded"
	OutcomeFailed     = "failed"
)

// Revision is an immutable snapshot of a deployment's desired state.
type Revision struct {
	DeploymentID    string
	N               int
	ApplicationID   string
	Version         lifecycle.Version
	ProfileID       string
	Parameters      map[string]any
	Operation       lifecycle.OperationKind
	Outcome         string
	YAML            []byte
	Digest          string
	ManifestVersion uint64
	CreatedAt       time.Time
	Components      []string
	Strategy        lifecycle.Strategy
	Forced          bool      // published by a break-glass override
	ForceReason     string    // the override's reason
	InstalledAt     time.Time // zero: never confirmed installed
}

// Causes of state transitions, as recorded in history.
const (
	CauseReport             = lifecycle.CauseReport
	CauseOperation          = lifecycle.CauseOperation
	CauseDeadline           = lifecycle.CauseDeadline
	CauseOperator           = lifecycle.CauseOperator
	CauseDeviceUnregistered = lifecycle.CauseDeviceUnregistered
)

// Transition is one entry of a deployment's history.
type Transition struct {
	At       time.Time
	From     lifecycle.State // "" for the first entry
	To       lifecycle.State
	Cause    string
	Revision int
	Reason   string
}

// StoredReport is a status report as stored.
type StoredReport struct {
	ReceivedAt time.Time
	Adopted    uint64
	State      string
	Stale      bool
	JSON       json.RawMessage
}
