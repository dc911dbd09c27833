//go:build race

package client_test

// raceOn: the race detector slows the tests that move many bytes tenfold.
const raceOn = true
