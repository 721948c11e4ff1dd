package wire

// ValidEnvName reports whether k is a portable environment variable name
// (a letter or underscore, then letters, digits, underscores): what -x,
// --env-file and SSH env requests accept.
func ValidEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
