package lifecycle

// Bodies of the rollout events (subject: the rollout; related: its
// application). Each rollout change appends them in its transaction; the
// driver's are the scheduler's (actor "wfm"), the actions' the operator's.

// RolloutCreatedBody is the body of rollout.created: a rollout started.
type RolloutCreatedBody struct {
	Action   RolloutAction `json:"action"`
	Target   string        `json:"targetVersion,omitempty"`
	Eligible int           `json:"eligible"`
	Excluded int           `json:"excluded"`
	Waves    int           `json:"waves"`
}

// EventType implements EventBody.
func (RolloutCreatedBody) EventType() EventType { return EventRolloutCreated }

// RolloutStateChangedBody is the body of rollout.state_changed.
type RolloutStateChangedBody struct {
	From   RolloutState `json:"from"`
	To     RolloutState `json:"to"`
	Cause  RolloutCause `json:"cause"`
	Detail string       `json:"detail,omitempty"`
}

// EventType implements EventBody.
func (RolloutStateChangedBody) EventType() EventType { return EventRolloutStateChanged }

// RolloutWaveStartedBody is the body of rollout.wave_started: a wave became
// the current one (Wave counts from 1).
type RolloutWaveStartedBody struct {
	Wave int `json:"wave"`
	Size int `json:"size"`
}

// EventType implements EventBody.
func (RolloutWaveStartedBody) EventType() EventType { return EventRolloutWaveStarted }

// RolloutWaveSettledBody is the body of rollout.wave_settled: every member
// of the wave (from 1) ended, with the counts by status.
type RolloutWaveSettledBody struct {
	Wave      int `json:"wave"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Removed   int `json:"removed"`
	Excluded  int `json:"excluded"`
}

// EventType implements EventBody.
func (RolloutWaveSettledBody) EventType() EventType { return EventRolloutWaveSettled }

// RolloutMemberExcludedBody is the body of rollout.member_excluded: an
// operator excluded one member (the related device and, once it exists,
// deployment name it). Its deployment keeps the state it reached.
type RolloutMemberExcludedBody struct {
	// PreviousStatus is the member's status before.
	PreviousStatus MemberStatus `json:"previousStatus"`
}

// EventType implements EventBody.
func (RolloutMemberExcludedBody) EventType() EventType { return EventRolloutMemberExcluded }
