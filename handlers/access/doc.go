// Package access is dwr's trust boundary as NATS sees it: two accounts (the
// service's own, holding its streams and JetStream API, and the clients'),
// the subjects one exports and the other imports, and per identity the
// subjects its roles allow. ServerConfig renders it as nats-server
// configuration, which the embedded server runs as is and which an operator
// includes in a cluster's configuration (ClusterConfig). It writes and reads
// the credential files identities connect with.
//
// It may import domain (for roles and members), schemas (the names a client
// connects with), handlers/embedded (to open a stopped service's server),
// the NATS client libraries and the standard library.
package access
