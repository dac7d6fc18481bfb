raise RuntimeError("this app refuses to load")
