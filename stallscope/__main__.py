from stallscope.commands import entry

if __name__ == "__main__":  # not when a worker process started by multiprocessing imports it
    entry()
