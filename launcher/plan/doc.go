// Package plan is the launcher's vocabulary of placement: a rank's place
// in the job (Rank), the pure function that places ranks on hosts
// (Ranks, with Options), sets of ranks as users write them (RankSet), the
// GPU filters (GPUFilter), how console lines show their rank (TagStyle),
// and the implicit local host.
//
// It is the leaf of the launcher's packages: every other one may import
// it, and it imports none of them (nor agent/..., nor nccl): only
// hostfile and internal/term. Nothing here logs, dials or reads files.
package plan
