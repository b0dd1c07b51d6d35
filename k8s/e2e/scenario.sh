scenario() { say "scenario: not yet"; }
