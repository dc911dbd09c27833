package schemas

// Labels are a goal's names and values — a customer, a ticket, a
// deployment — that goal.list selects by (Query.Labels): each name is a
// name (1-63 lower-case letters, digits, '_' or '-'), each value text of at
// most 256 bytes, at most 16 of them. They are not sealed: like a goal's
// title, they are for finding work, not for its secrets.
type Labels map[string]string
