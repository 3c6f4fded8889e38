"""transpose(), permute() and cast_transpose() on arrays: validate, plan, run what dispatch picks
on the caller's stream (the framework ops and the public calls above call these)."""
