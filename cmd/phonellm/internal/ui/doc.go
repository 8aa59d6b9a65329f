// Package ui renders phonellm for people and programs: results on stdout (plain or JSON), progress and
// warnings on stderr — styled with lipgloss only when stderr is a terminal and NO_COLOR is unset, as plain
// throttled lines otherwise.
package ui
