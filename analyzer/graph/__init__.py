"""The dependency graph between host threads and device streams (``dependency.Graph``): its edges, the
waits between threads, where data was loaded, and the invariants every graph keeps."""
