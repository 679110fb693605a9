"""How items are scored fast and safely: the model contract (`scoring`), rows of several items and
passes cut by items or tokens (`packing`), `auto` and the out-of-memory back-off (`batching`), data
parallel ranks (`distributed`) and the run directory that makes a run resumable and never
overwritten (`runstore`)."""
