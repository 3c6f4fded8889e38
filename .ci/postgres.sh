# Sourced by .ci/run: starts a PostgreSQL server in a temporary directory and exports
# AUTOTRANSPOSE_TEST_PG_URL. (Filled in by the store work.)
true
