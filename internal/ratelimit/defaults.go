package ratelimit

// The server's default device API budget of one WFM client (cmd/wfm flags
// -device-rate and -device-burst). The device simulator paces the devices
// of one client to the same budget by default.
const (
	// DefaultDeviceRate is how many device API requests a second one client
	// may make on average.
	DefaultDeviceRate = 20.0
	// DefaultDeviceBurst is how many device API requests one client may make
	// at once above its rate.
	DefaultDeviceBurst = 40
)
