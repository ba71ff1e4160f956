// Package charttest checks the Helm chart in ../wfm without a cluster: it
// renders the chart with the helm binary and decodes every manifest strictly
// into the Kubernetes API types (an unknown field is an error), then checks
// that the chart's values reach the pods as settings wfm has (flag and
// environment names read from cmd/wfm's source).
//
// It is a module of its own so that the server's module does not depend on
// k8s.io; it holds tests only.
package charttest
