print("retry")
