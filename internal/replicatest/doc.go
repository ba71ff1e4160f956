// Package replicatest holds the process-level test of several wfm replicas
// over one PostgreSQL, the way the Helm chart in deploy/helm runs them: it
// builds bin/wfm, starts three processes on one database, drives devices and
// operations through different replicas and kills one of them mid-operation.
// It has no code outside its tests.
package replicatest
