"""Pure: observed children + generation -> status and conditions."""
