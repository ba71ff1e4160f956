package lifecycle

// Bodies of the rollout events (subject: the rollout; related: its
// application). Each rollout change appends them in its transaction.

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
// operator excluded one member. Related: its deployment and device.
type RolloutMemberExcludedBody struct {
	DeploymentID string       `json:"deploymentId,omitempty"`
	ClientID     string       `json:"clientId"`
	DeviceID     string       `json:"deviceId"`
	Status       MemberStatus `json:"previousStatus"`
}

// EventType implements EventBody.
func (RolloutMemberExcludedBody) EventType() EventType { return EventRolloutMemberExcluded }
