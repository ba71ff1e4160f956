// Package replicatest holds the process-level tests of wfm: several replicas
// over one PostgreSQL, the way the Helm chart in deploy/helm runs them (it
// builds bin/wfm, starts three processes on one database, drives devices and
// operations through different replicas and kills one of them
// mid-operation), and the durability of the status reports' group commit (a
// process killed during a load of reports has stored every report it
// acknowledged). It has no code outside its tests.
package replicatest
