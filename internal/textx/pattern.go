package textx

// MatchPattern matches s against pattern as OpenSSH's match_pattern does
// (sshd's AcceptEnv and AllowUsers, ssh_config's Host and Match lines):
// * is any run of bytes, ? exactly one byte, every other byte itself,
// case and all; no classes, no escapes. Backtracking is bounded: one
// saved star position, so many stars cost no more than one.
func MatchPattern(pattern, s string) bool {
	px, sx := 0, 0
	star, next := -1, 0
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				star, next = px, sx+1
				px++
				continue
			case '?':
				if sx < len(s) {
					px++
					sx++
					continue
				}
			default:
				if sx < len(s) && s[sx] == c {
					px++
					sx++
					continue
				}
			}
		}
		if star >= 0 && next <= len(s) {
			px, sx = star+1, next
			next++
			continue
		}
		return false
	}
	return true
}
