package pmi

import "gangway/agent/wire"

// ProcessMapping builds the PMI_process_mapping value for a placement, where
// hostOfRank[r] is the node of rank r. The launcher computes it and the
// agents serve it, so the function lives in agent/wire; see
// wire.ProcessMapping for the grammar.
func ProcessMapping(hostOfRank []int) string { return wire.ProcessMapping(hostOfRank) }
