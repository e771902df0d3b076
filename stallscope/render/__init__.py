"""Terminal renderers: an analysis, a diff or a job as the text the commands print. They render the
analyzer's results and never compute a figure of their own."""
